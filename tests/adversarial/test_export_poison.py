"""Class 3 of issue 11: ``rsi worlds export`` of an agent with bad stored rows repairs or skips them
and says so, on SQLite and PostgreSQL; the repaired lines import again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from rsi_common.config import Settings
from rsi_common.db import session_factory
from rsi_worker.cli import app
from rsi_worker.jobs.worldfile import ExportNote, export_lines, parse_line
from tests.adversarial.stranding import GOOD, LONE, REQUEST, escaped, nested, write_json
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(60)
A = "shop"


@pytest.fixture
def stack(db_url: str) -> Iterator[Stack]:
    s = Stack(Settings(database_url=db_url, model_backoff_s=0))
    yield s
    s.close()


def seeded(stack: Stack) -> list[str]:
    """Four stored turns of ``A``; their world ids, oldest first."""
    turns = [stack.say(A, "c1", REQUEST), stack.say(A, "c2", GOOD, signals={"stars": 5}),
             stack.say(A, "c3", GOOD), stack.say(A, "c4", REQUEST)]
    return [stack.world_id(A, t) for t in turns]


def poison(stack: Stack, ids: list[str]) -> None:
    """Row 1: a lone surrogate in the record (repairable). Row 2: signals nested 300 levels (not)."""
    with stack.sessions() as s:
        world = s.execute(sa.text("SELECT world FROM rsi_worlds WHERE id = :id"), {"id": ids[1]}).scalar_one()
    world = json.loads(world) if isinstance(world, str) else world
    world["outcome"]["final_text"] = f"answer {LONE} end"
    write_json(stack.engine, "world", ids[1], escaped(world))
    write_json(stack.engine, "signals", ids[2], nested(300))


def test_export_repairs_or_skips_bad_rows_and_names_them(stack: Stack) -> None:
    ids = seeded(stack)
    poison(stack, ids)
    notes: list[ExportNote] = []
    with session_factory(stack.engine)() as s:
        lines = list(export_lines(s, A, notes))
    assert len(lines) == 3  # every row that can be exported was
    assert notes == [
        ExportNote(ids[1], "repaired", "1 invalid value(s) replaced, first at world.outcome.final_text: "
                   "lone surrogate U+D800 (not a Unicode scalar value)"),
        ExportNote(ids[2], "skipped", "signals: nested deeper than 128 levels"),
    ]
    repaired = json.loads(lines[1])
    assert repaired["world"]["outcome"]["final_text"] == "answer \ufffd end"
    for n, line in enumerate(lines, start=1):
        line.encode("utf-8")  # writable as UTF-8
        parse_line(line, n)  # and accepted by rsi worlds import


def test_undecodable_json_is_skipped_where_the_database_can_hold_it(stack: Stack) -> None:
    ids = seeded(stack)
    if stack.engine.dialect.name == "postgresql":
        with pytest.raises(sa.exc.DataError):  # PostgreSQL's json type never stores it
            write_json(stack.engine, "world", ids[0], '{"schema": "rsi-world/1"')
        return
    write_json(stack.engine, "world", ids[0], '{"schema": "rsi-world/1"')
    notes: list[ExportNote] = []
    with session_factory(stack.engine)() as s:
        assert len(list(export_lines(s, A, notes))) == 3
    assert notes == [ExportNote(ids[0], "skipped", "world: stored JSON cannot be decoded")]


def test_the_export_command_exits_0_and_reports_on_stderr(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rsi.db'}"
    stack = Stack(Settings(database_url=url, model_backoff_s=0))
    try:
        ids = seeded(stack)
        poison(stack, ids)
    finally:
        stack.close()
    env = {"RSI_DATABASE_URL": url, "RSI_HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(app, ["worlds", "export", A], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3 and "Traceback" not in result.output
    assert result.stderr.splitlines() == [
        f"world {ids[1]}: repaired: 1 invalid value(s) replaced, first at world.outcome.final_text: "
        "lone surrogate U+D800 (not a Unicode scalar value)",
        f"world {ids[2]}: skipped: signals: nested deeper than 128 levels",
        "1 world(s) skipped, 1 repaired",
    ]
    out = tmp_path / "worlds.jsonl"
    to_file = CliRunner().invoke(app, ["worlds", "export", A, "--out", str(out)], env=env)
    assert to_file.exit_code == 0 and len(out.read_text(encoding="utf-8").splitlines()) == 3
    assert to_file.stderr.splitlines()[0] == f"3 world(s) of {A} written to {out}"
    assert to_file.stderr.splitlines()[-1] == "1 world(s) skipped, 1 repaired"
