"""``rsi worlds export`` / ``rsi worlds import``: bad lines reported with their numbers and skipped,
the rest stored with the real world validation; export → import round-trips; no consolidation is
triggered unless ``--trigger``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from rsi_common.db import WorldRow, make_engine, session_factory
from rsi_worker.jobs.worldfile import LINE_KEYS
from tests.integration.commands.conftest import Cli, corrected, world_line
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(60)
AGENTS = ("a1", "a2", "a3", "a4")


def worlds_in(db_url: str) -> list[WorldRow]:
    engine = make_engine(db_url)
    try:
        with session_factory(engine)() as s:
            return list(s.execute(sa.select(WorldRow).order_by(WorldRow.agent_id, WorldRow.clock)).scalars())
    finally:
        engine.dispose()


def hundred_lines() -> list[str]:
    """100 lines over 4 agents; lines 10, 50 and 77 (1-based) are bad."""
    lines = [json.dumps(world_line(AGENTS[i % 4], i)) for i in range(100)]
    lines[9] = lines[9][:-40]  # cut off: malformed JSON
    schema = world_line("a2", 49)
    del schema["world"]["tools"]["calls"][0]["name"]
    lines[49] = json.dumps(schema)
    secret = world_line("a1", 76, input="my key is sk-" + "A1b2C3d4" * 4)
    lines[76] = json.dumps(secret)
    return lines


def test_import_skips_bad_lines_with_their_numbers(cli: Cli, db_file: str, tmp_path: Path,
                                                   redis_url: str) -> None:
    path = tmp_path / "worlds.jsonl"
    path.write_text("\n".join(hundred_lines()) + "\n", encoding="utf-8")
    report = cli.json("worlds", "import", str(path))
    assert (report["imported"], report["existing"], report["skipped"]) == (97, 0, 3)
    errors = {e["line"]: e["reason"] for e in report["errors"]}
    assert sorted(errors) == [10, 50, 77]
    assert errors[10].startswith("malformed JSON")
    assert errors[50].startswith("invalid world: tools.calls[0].name")
    assert errors[77].startswith("credential refused: input") and "sk-" not in errors[77]
    assert report["agents"] == {"a1": 24, "a2": 23, "a3": 25, "a4": 25}
    rows = worlds_in(db_file)
    assert len(rows) == 97 and all(r.enqueued_at is not None for r in rows)  # no trigger by default
    assert {r.io_id for r in rows}.isdisjoint({"io-a2-049", "io-a1-076", "io-a2-009"})
    assert [r.seq for r in rows if r.agent_id == "a3" and r.interaction_id == "c2"] == [1, 2]
    client = redis.Redis.from_url(redis_url)
    assert client.llen("consolidate") == 0 and not client.keys("rsi:*:lease")

    again = cli("worlds", "import", str(path))  # the same file again: nothing new, not a failure
    assert again.exit_code == 0 and "0 imported, 97 already stored, 3 skipped" in again.stdout
    assert "line" in again.stderr and "malformed JSON" in again.stderr


def test_every_line_bad_exits_1(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('not json\n\n{"world": {}}\n[1, 2]\n{"agent_id": "a", "world": {}, "extra": 1}\n',
                    encoding="utf-8")
    report = cli.json("worlds", "import", str(path), code=1)
    assert report["imported"] == 0
    assert [e["line"] for e in report["errors"]] == [1, 3, 4, 5]  # the blank line 2 is ignored
    assert "agent_id: missing" in report["errors"][1]["reason"]
    assert "unknown key(s) extra" in report["errors"][3]["reason"]
    missing = cli("worlds", "import", str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 1 and "no such file" in missing.stderr


def test_trigger_enqueues_one_run_per_agent(cli: Cli, tmp_path: Path, redis_url: str) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps(world_line(AGENTS[i % 2], i)) + "\n" for i in range(6)),
                    encoding="utf-8")
    report = cli.json("worlds", "import", str(path), "--trigger")
    assert report["imported"] == 6 and report["triggered"] == {"a1": "enqueued", "a2": "enqueued"}
    client = redis.Redis.from_url(redis_url)
    assert client.llen("consolidate") == 2 and len(client.keys("rsi:*:lease")) == 2


def test_export_import_round_trip(cli: Cli, stack: Stack, tmp_path: Path) -> None:
    corrected(stack, "shop")
    stack.say("shop", "c2", "Compare phones: use search query=phones", signals={"stars": 5})
    stack.consolidate("shop")  # reads an implicit signal into the first world's signals
    out = tmp_path / "shop.jsonl"
    assert cli("worlds", "export", "shop", "--out", str(out)).exit_code == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    parsed = [json.loads(line) for line in lines]
    assert [tuple(p) for p in parsed] == [LINE_KEYS] * 3
    assert [p["world"]["clock"] for p in parsed] == sorted(p["world"]["clock"] for p in parsed)  # newest last
    assert "implicit" in parsed[0]["signals"]

    other = {"RSI_DATABASE_URL": f"sqlite:///{tmp_path / 'other.db'}"}
    assert cli("db", "upgrade", env=other).exit_code == 0
    report = cli.json("worlds", "import", str(out), env=other)
    assert (report["imported"], report["skipped"]) == (3, 0)
    assert cli("worlds", "export", "shop", env=other).stdout == out.read_text(encoding="utf-8")

    copied = cli.json("worlds", "import", str(out), "--agent", "copy")
    assert copied["agents"] == {"copy": 3}
    copy_lines = [json.loads(line) for line in cli("worlds", "export", "copy").stdout.splitlines()]
    assert [c["world"]["agent_id"] for c in copy_lines] == ["copy"] * 3
    assert [(c["io_id"], c["seq"], c["signals"]) for c in copy_lines] == [
        (p["io_id"], p["seq"], p["signals"]) for p in parsed]

    unknown = cli("worlds", "export", "ghost")
    assert unknown.exit_code == 1 and "unknown agent 'ghost'" in unknown.stderr
