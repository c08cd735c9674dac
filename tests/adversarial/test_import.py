"""Issue class 5: ``rsi worlds import`` never stops midway and never stores a 100 MB row.

Each line is checked on its own (size before decoding, UTF-8, depth before parsing), reported with
its number and reason, and the good ones are committed — or none with ``--atomic``. ``rsi worlds
export`` never fails on a bad stored row.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_common.boundary import MAX_LINE_BYTES, REPLACEMENT_CHAR
from rsi_common.db import WorldRow, make_engine, session_factory
from rsi_common.errors import RsiError
from rsi_worker.jobs.worldfile import parse_line, read_lines
from tests.adversarial import attacks
from tests.adversarial.boundary_support import assert_clean_message, has_bad_chars
from tests.integration.commands.conftest import Cli, cli, db_file, world_line

__all__ = ["cli", "db_file"]

pytestmark = pytest.mark.timeout(180)


def _rows(db_url: str) -> list[WorldRow]:
    engine = make_engine(db_url)
    try:
        with session_factory(engine)() as s:
            return list(s.execute(sa.select(WorldRow).order_by(WorldRow.io_id)).scalars())
    finally:
        engine.dispose()


def _line(n: int, **world: Any) -> bytes:
    return json.dumps(world_line("a1", n, **world)).encode("utf-8")


def _hostile_file(path: Path) -> dict[int, str]:
    """Good lines 1, 3, 9 and 11; the others are each one attack. Returns line → expected reason start."""
    sample = json.dumps(world_line("a1", 4, input="PLACEHOLDER"))
    deep = sample.replace('"PLACEHOLDER"', "[" * 100_000 + "]" * 100_000)  # json.dumps itself would recurse
    lines: list[bytes] = [
        _line(1),
        b'{"agent_id": "a1", "world": {"input": "caf\xe9"}}',  # latin-1 byte: not UTF-8
        _line(3),
        deep.encode("utf-8"),
        b'{"agent_id": "a1", "world": ' + b"[" * 300 + b"]" * 300 + b"}",
        b'{"agent_id": "a1", "io_id": "' + b"x" * (100 * 1024 * 1024) + b'"}',  # 100 MB line
        _line(7).replace(b'"signals": {}', b'"signals": {"stars": NaN}'),
        json.dumps(world_line("a1", 8, input="q"), ensure_ascii=True).replace(
            '"signals": {}', '"signals": {"comment": "\\ud800"}').encode(),
        _line(9, input="a lone surrogate escape: \ud800"),  # json escapes it as \ud800: repaired, stored
        json.dumps({**world_line("a1", 10), "agent_id": "a1\u0000"}).encode(),
        _line(11),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return {
        2: "not valid UTF-8 (byte ",
        4: "nested deeper than 65 levels",
        5: "nested deeper than 65 levels",
        6: f"over the size limit of {MAX_LINE_BYTES:,} bytes",
        7: "a number is not a finite JSON number",
        8: "signals.comment: contains a lone surrogate",
        10: "agent_id: not a valid id",
    }


def test_a_hostile_file_imports_every_good_line(cli: Cli, db_file: str, tmp_path: Path) -> None:
    path = tmp_path / "hostile.jsonl"
    expected = _hostile_file(path)
    report = cli.json("worlds", "import", str(path))
    errors = {e["line"]: e["reason"] for e in report["errors"]}
    assert sorted(errors) == sorted(expected)
    for line, start in expected.items():
        assert errors[line].startswith(start), (line, errors[line])
        assert "xxxxxxxxxx" not in errors[line] and len(errors[line]) < 300  # never the line's text
    assert (report["imported"], report["skipped"], report["committed"]) == (4, 7, True)
    rows = _rows(db_file)
    assert [r.io_id for r in rows] == ["io-a1-001", "io-a1-003", "io-a1-009", "io-a1-011"]
    assert max(len(json.dumps(r.world)) for r in rows) < 10_000
    repaired = next(r for r in rows if r.io_id == "io-a1-009")
    assert repaired.world["input"].endswith(REPLACEMENT_CHAR)
    assert repaired.world["defects"] == [{"path": "input", "defect": "lone_surrogate"}]

    text = cli("worlds", "import", str(path))  # the table output: no traceback, reasons shown
    assert text.exit_code == 0 and "not valid UTF-8" in text.stderr


def test_atomic_commits_nothing_when_a_line_is_bad(cli: Cli, db_file: str, tmp_path: Path) -> None:
    path = tmp_path / "hostile.jsonl"
    expected = _hostile_file(path)
    report = cli.json("worlds", "import", str(path), "--atomic", code=1)
    assert report["committed"] is False and report["imported"] == 0 and report["agents"] == {}
    assert sorted(e["line"] for e in report["errors"]) == sorted(expected)  # every line still checked
    assert _rows(db_file) == []
    text = cli("worlds", "import", str(path), "--atomic")
    assert text.exit_code == 1 and "nothing was imported" in text.stdout

    good = tmp_path / "good.jsonl"
    good.write_bytes(b"\n".join(_line(n) for n in range(1, 6)) + b"\n")
    report = cli.json("worlds", "import", str(good), "--atomic")
    assert (report["imported"], report["committed"]) == (5, True) and len(_rows(db_file)) == 5
    again = cli.json("worlds", "import", str(good), "--atomic")
    assert (again["imported"], again["existing"], again["committed"]) == (0, 5, True)


def test_import_from_stdin_reads_bytes(cli: Cli, db_file: str) -> None:
    result = cli("worlds", "import", "-", "--json", input=(_line(1) + b"\n\xff\xfe\n").decode("latin-1"))
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["imported"] == 1 and report["errors"][0]["line"] == 2


def test_read_lines_never_keeps_more_than_the_limit() -> None:
    stream = io.BytesIO(b"short\n" + b"y" * 5000 + b"\nnext\n" + b"z" * 20)
    lines = list(read_lines(stream, max_bytes=100))
    assert [len(x) for x in lines] == [6, 101, 5, 20]
    assert lines[2] == b"next\n"
    with pytest.raises(RsiError, match=r"over the size limit of 16,000,000 bytes"):
        parse_line(b"x" * (MAX_LINE_BYTES + 1), 1)


@pytest.mark.parametrize("entry", attacks.section("unicode"), ids=attacks.ids("unicode"))
def test_unicode_attacks_in_a_line(entry: dict[str, Any]) -> None:
    line = json.dumps(world_line("a1", 1, input=entry["text"]))  # \\u escapes, decoded by the parser
    parsed = parse_line(line.encode("ascii"), 1)
    assert not has_bad_chars(json.dumps(parsed.world, ensure_ascii=False))
    assert bool(parsed.world.get("defects")) == has_bad_chars(entry["text"])


def test_raw_surrogate_bytes_are_not_utf8() -> None:
    raw = json.dumps(world_line("a1", 1), ensure_ascii=False).replace("EMEA", "EM\ud800EA")
    with pytest.raises(RsiError, match=r"^not valid UTF-8"):
        parse_line(raw.encode("utf-8", "surrogatepass"), 1)


# --- export never fails on a bad stored row ----------------------------------------------------------


def test_export_repairs_or_skips_bad_rows(cli: Cli, db_file: str, tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_bytes(b"\n".join(_line(n) for n in (1, 2, 3)) + b"\n")
    cli.json("worlds", "import", str(path))
    engine = make_engine(db_file)
    try:  # rows written before the boundary existed: a lone surrogate, and NaN (raw SQL on SQLite)
        with engine.begin() as conn:
            bad = json.dumps({"input": "legacy \ud800", "clock": 1.0}, ensure_ascii=True)
            conn.execute(sa.text("UPDATE rsi_worlds SET world = :w WHERE io_id = 'io-a1-001'"), {"w": bad})
            conn.execute(sa.text("UPDATE rsi_worlds SET signals = '{\"x\": NaN}' WHERE io_id = 'io-a1-002'"))
        ids = {r.io_id: r.id for r in _rows(db_file)}
    finally:
        engine.dispose()
    out = cli("worlds", "export", "a1")
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["world"]["input"] == "legacy " + REPLACEMENT_CHAR
    assert json.loads(lines[1])["signals"] == {"x": None}  # NaN written as null
    assert f"world {ids['io-a1-001']}: repaired: 1 invalid value(s) replaced" in out.stderr
    assert f"world {ids['io-a1-002']}: repaired: 1 invalid value(s) replaced" in out.stderr
    target = tmp_path / "out.jsonl"
    assert cli("worlds", "export", "a1", "--out", str(target)).exit_code == 0
    assert target.read_text("utf-8").splitlines() == lines


# --- fuzz: parse_line raises only the project's errors ----------------------------------------------

_GOOD = json.dumps(world_line("a1", 1))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.builds(lambda cut, junk: _GOOD.encode()[:cut] + junk,
                                           st.integers(0, len(_GOOD)), st.binary(max_size=20)))
def test_parse_line_fuzz_bytes(raw: bytes) -> None:
    try:
        parse_line(raw, 1)
    except RsiError as exc:
        assert_clean_message(exc)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats()
                    | st.text(st.characters(codec=None), max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                max_size=3), max_leaves=10),
       st.sampled_from(["world", "signals", "agent_id", "io_id", "seq", "extra"]))
def test_parse_line_fuzz_fields(value: Any, key: str) -> None:
    obj = world_line("a1", 1)
    obj[key] = value
    try:
        parsed = parse_line(json.dumps(obj), 1)
    except RsiError as exc:
        assert_clean_message(exc)
        return
    assert not has_bad_chars(json.dumps([parsed.world, parsed.signals], ensure_ascii=False))
