"""The worlds file of ``rsi worlds export`` / ``rsi worlds import``: JSON Lines, one stored turn a line.

Line format (keys in this order; the world itself is versioned by its ``schema``, ``rsi-world/1``)::

    {"agent_id": str, "io_id": str, "interaction_id": str, "seq": int, "world": {...}, "signals": {...}}

An export lists one agent's stored worlds oldest first (newest last: ``clock``, then ``seq``), so an
import in file order numbers ``seq`` the same way again (``seq`` is recomputed on import, docs/formats.md §4 —
the line's ``seq`` is informational and only type-checked).

**Import** reads the file as bytes and checks every line on its own; a bad line is reported with its
number (from 1) and reason and skipped, the others are stored (``atomic=True``, ``--atomic``: all
lines in one transaction, and nothing is stored when any line is bad). A reason never carries the
line's text. The input boundary (docs/security/input-boundary.md) comes first:

* a line longer than ``MAX_LINE_BYTES`` (16,000,000 bytes) is refused by its size before it is
  decoded or parsed (:func:`read_lines` keeps at most one byte more than the limit in memory);
* a line that is not UTF-8, nested deeper than the depth limit (checked on the text, before
  ``json.loads``) or holding ``NaN``/``Infinity`` or an over-long number is refused;
* malformed JSON, a line that is not an object, unknown keys, a missing ``world`` or agent id;
* the world and the explicit signals get exactly the host-side checks of
  :func:`rsi_common.host_input.parse_turn`: :func:`~rsi_common.world.finalize_world` (schema
  validation naming the field, clipping, size limit) and the **credential refusal**; the line's
  ``io_id`` / ``interaction_id`` must agree with the world's;
* ``signals.implicit`` (written by an earlier consolidation) is kept — an import restores data this
  system produced — after a shape, boundary and credential check; the host API itself never accepts it.

**Export** never fails on a bad stored row: a row whose JSON holds a lone surrogate (stored before
the boundary existed) is exported with U+FFFD in its place, a row that cannot be written as JSON at
all is skipped; both are reported in ``notes`` (``rsi worlds export`` prints them on stderr).

Good lines are stored through the database repository (:func:`rsi_common.db.save_world`), one
transaction per line. A turn already stored for the agent (same ``io_id``) is left as it is and
counted as ``existing``, so importing a file twice is harmless. The agents' world retention
(``RSI_WORLD_RETENTION``, latest 60) is applied once per agent after the import.

**No consolidation is triggered by default (project decision).** An import is a data move
(migration, restore, seeding an agent); starting a run per imported turn would flood the cluster
with runs over old data. Imported worlds are stored as already handed off, so the sweeper does not
trigger them either; their signals are simply fresh for the agent's next run. With ``trigger=True``
(``rsi worlds import --trigger``) each agent that got new worlds is triggered **once**, for its
newest world, exactly like a recorded turn (frozen agents excepted); a trigger that cannot be
handed off (Redis or broker down) leaves the worlds un-enqueued for the sweeper.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal

import sqlalchemy as sa
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.boundary import (
    MAX_DEPTH,
    MAX_IMPLICIT_BYTES,
    MAX_INT32,
    MAX_LINE_BYTES,
    check_id,
    check_int,
    key_segment,
    parse_json,
    scan,
)
from rsi_common.coord import Coordinator
from rsi_common.credentials import describe, find_in, safe_repr
from rsi_common.db import (
    WorldRow,
    get_agent,
    load_latest_worlds,
    lock_agent,
    mark_enqueued,
    retain_worlds,
    save_world,
)
from rsi_common.dispatch import Dispatcher
from rsi_common.errors import CredentialError, InvalidInput, RsiError, WorldError
from rsi_common.handoff import trigger_consolidation
from rsi_common.host_input import parse_turn
from rsi_common.stored import first_problem, repair
from rsi_common.world import new_world_id

__all__ = [
    "LINE_KEYS",
    "ExportNote",
    "ImportReport",
    "LineError",
    "ParsedLine",
    "export_lines",
    "import_lines",
    "parse_line",
    "read_lines",
    "trigger_imported",
]

LINE_KEYS: tuple[str, ...] = ("agent_id", "io_id", "interaction_id", "seq", "world", "signals")
"""Keys of a line, in output order."""


def _line(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class ExportNote:
    """A stored row the export could not write as stored: ``skipped`` (not written) or ``repaired``
    (written with invalid characters replaced); ``reason`` quotes no content."""

    world_id: str
    action: Literal["skipped", "repaired"]
    reason: str

    def line(self) -> str:
        """The stderr line of ``rsi worlds export``."""
        return f"world {self.world_id}: {self.action}: {self.reason}"


def _export_line(row: Any) -> tuple[str | None, ExportNote | None]:
    """One stored row as a line, repaired when it can be (lone surrogates → U+FFFD, non-finite
    numbers → null), or ``None`` with a ``skipped`` note when it cannot be decoded at all."""
    parts: dict[str, Any] = {}
    repaired = 0
    problems: list[str] = []
    for field_name, text in (("world", row.world), ("signals", row.signals)):
        try:
            value = json.loads(text) if text is not None else ({} if field_name == "signals" else None)
        except (ValueError, RecursionError):
            return None, ExportNote(row.id, "skipped", f"{field_name}: stored JSON cannot be decoded")
        problem = first_problem(value, field_name)
        if problem is not None:
            value, n = repair(value)
            left = first_problem(value, field_name)  # what repair cannot fix (too deep)
            if left is not None:
                return None, ExportNote(row.id, "skipped", left)
            problems.append(problem)
            repaired += n
        parts[field_name] = value
    if not isinstance(parts["world"], dict):
        return None, ExportNote(row.id, "skipped", "world: not a JSON object")
    obj = {"agent_id": row.agent_id, "io_id": row.io_id, "interaction_id": row.interaction_id, "seq": row.seq,
           "world": parts["world"], "signals": parts["signals"] or {}}
    note = None
    if repaired:
        note = ExportNote(row.id, "repaired", f"{repaired} invalid value(s) replaced, first at {problems[0]}")
    return _line(obj), note


def export_lines(
    session: Session, agent_id: str, notes: list[ExportNote] | None = None
) -> Iterator[str]:
    """The agent's stored worlds as lines (no newline), oldest first.

    A stored row is never fatal (``docs/operations/failure-recovery.md``, *Export*): each row's
    JSON is decoded on its own; invalid text (a lone surrogate) and non-finite numbers are
    repaired (U+FFFD, ``null``), a row that cannot be decoded (or is nested too deeply) is
    skipped. Each such row is appended to ``notes`` (world id, action, reason).

    Raises:
        UnknownAgentError: no such agent.
    """
    get_agent(session, agent_id)
    stmt = (
        sa.select(WorldRow.id, WorldRow.agent_id, WorldRow.io_id, WorldRow.interaction_id, WorldRow.seq,
                  sa.cast(WorldRow.world, sa.Text).label("world"),
                  sa.cast(WorldRow.signals, sa.Text).label("signals"))
        .where(WorldRow.agent_id == agent_id)
        .order_by(WorldRow.clock, WorldRow.seq, WorldRow.id)
    )
    for row in session.execute(stmt):
        line, note = _export_line(row)
        if note is not None and notes is not None:
            notes.append(note)
        if line is not None:
            yield line


def read_lines(stream: BinaryIO, max_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of a binary stream, each cut to at most ``max_bytes + 1`` bytes: the rest of an
    over-long line is read and dropped in chunks, so a huge line never sits in memory and its
    (kept) head still fails the size check of :func:`parse_line`."""
    while True:
        line = stream.readline(max_bytes + 1)
        if not line:
            return
        if len(line) > max_bytes and not line.endswith(b"\n"):
            rest = line
            while rest and not rest.endswith(b"\n"):
                rest = stream.readline(1 << 20)
        yield line


@dataclass(frozen=True)
class LineError:
    """A skipped line: its number (from 1) and why."""

    line: int
    reason: str


@dataclass(frozen=True)
class ParsedLine:
    """A checked line, ready to store."""

    line: int
    agent_id: str
    world: dict[str, Any]
    signals: dict[str, Any]


def _implicit(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not isinstance(value.get("kind"), str):
        raise InvalidInput("signals.implicit: must be an object with a string 'kind'")
    if not all(isinstance(k, str) and isinstance(v, str | None) for k, v in value.items()):
        raise InvalidInput("signals.implicit: values must be strings")
    scan(value, "signals.implicit", max_bytes=MAX_IMPLICIT_BYTES, depth=2)
    hit = find_in(dict(value), "signals.implicit")
    if hit is not None:
        raise CredentialError(f"{hit[0]}: looks like a credential ({describe(hit[1])}); refused")
    return dict(value)


def _check_ids(obj: Mapping[str, Any], world: Mapping[str, Any]) -> None:
    for key in ("io_id", "interaction_id"):
        given = obj.get(key)
        if given is None:
            continue
        check_id(given, key, empty_ok=True)
        if given != str(world.get(key) or ""):
            raise InvalidInput(
                f"{key}: the line says {safe_repr(given)}, the world says {safe_repr(world.get(key))}"
            )
    seq = obj.get("seq")
    if seq is not None:
        check_int(seq, "seq", lo=1, hi=MAX_INT32)


def _decode(text: str | bytes) -> Any:
    """The line's JSON value, through the input boundary (size, UTF-8, depth; no reason shows text)."""
    # the line is level 1 and its world level 2: a world may use the whole depth limit
    return parse_json(text, None, max_bytes=MAX_LINE_BYTES, max_depth=MAX_DEPTH + 1)


def parse_line(text: str | bytes, line_no: int, agent: str | None = None) -> ParsedLine:
    """Check one line (module docstring). ``agent`` (``--agent``) overrides the line's agent id.

    Args:
        text: the line, as read (bytes, decoded here as UTF-8) or as text.
        line_no: its number, from 1.
        agent: store it under this agent.

    Raises:
        InvalidInput: the line is malformed (not UTF-8, not JSON, not an object, unknown keys, …);
            ``InputLimitError`` when it breaks the input boundary; ``WorldError`` /
            ``CredentialError`` for the world. Never anything outside ``RsiError``.
    """
    obj = _decode(text)
    if not isinstance(obj, dict):
        raise InvalidInput(f"a line must be a JSON object, got {type(obj).__name__}")
    unknown = sorted(key_segment(k, i)[1:] for i, k in enumerate(obj) if k not in LINE_KEYS)
    if unknown:
        raise InvalidInput(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(LINE_KEYS)}")
    agent_id = agent or obj.get("agent_id")
    if agent_id is None or agent_id == "":
        raise InvalidInput("agent_id: missing (pass --agent to import lines without one)")
    check_id(agent_id, "agent_id")
    world = obj.get("world")
    if not isinstance(world, dict):
        raise WorldError("world: missing, or not a JSON object")
    if agent:  # re-homed under another agent: the record names its new owner
        world = {**world, "agent_id": agent}
    signals = obj.get("signals") or {}
    if not isinstance(signals, dict):
        raise InvalidInput(f"signals: must be an object, got {type(signals).__name__}")
    explicit = {k: v for k, v in signals.items() if k != "implicit"}
    parsed = parse_turn(agent_id, {"world": world, "signals": explicit}, record_world=True)
    assert parsed.world is not None
    _check_ids(obj, parsed.world)
    clean = dict(parsed.signals)
    if "implicit" in signals:
        clean["implicit"] = _implicit(signals["implicit"])
    return ParsedLine(line_no, agent_id, parsed.world, clean)


def _reason(exc: Exception) -> str:
    if isinstance(exc, CredentialError):
        return f"credential refused: {exc}"
    if isinstance(exc, WorldError):
        return f"invalid world: {exc}"
    return str(exc)


@dataclass
class ImportReport:
    """What an import did."""

    imported: int = 0
    """Lines stored as new worlds."""
    existing: int = 0
    """Lines whose turn was already stored for the agent (left as it was)."""
    errors: list[LineError] = field(default_factory=list)
    """Skipped lines, in file order."""
    agents: dict[str, list[str]] = field(default_factory=dict)
    """Agent → ids of its newly stored worlds, in file order."""
    removed_by_retention: int = 0
    """Worlds deleted by the agents' retention after the import."""
    triggered: dict[str, str] = field(default_factory=dict)
    """Agent → trigger outcome (``enqueued``, ``pending``, ``deferred``, ``frozen``); ``--trigger`` only."""
    atomic: bool = False
    """All lines in one transaction (``--atomic``)."""
    committed: bool = True
    """False only for an atomic import with a bad line: nothing was stored."""

    @property
    def lines(self) -> int:
        return self.imported + self.existing + len(self.errors)

    def to_json(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "existing": self.existing,
            "skipped": len(self.errors),
            "errors": [{"line": e.line, "reason": e.reason} for e in self.errors],
            "agents": {a: len(ids) for a, ids in self.agents.items()},
            "removed_by_retention": self.removed_by_retention,
            "triggered": dict(self.triggered),
            "atomic": self.atomic,
            "committed": self.committed,
        }

    def stored(self, parsed: ParsedLine, wid: str | None) -> None:
        """Count one stored line (``wid`` None: the turn was already stored)."""
        if wid is None:
            self.existing += 1
        else:
            self.imported += 1
            self.agents.setdefault(parsed.agent_id, []).append(wid)


_LINE_ERRORS = (RsiError, ValueError, IntegrityError, DataError)
"""What makes one line fail (``ValueError`` covers a decoding error of a ``str`` caller)."""


def _blank(text: str | bytes) -> bool:
    return not text.strip()


def _store_in(s: Session, p: ParsedLine, *, enqueued: bool) -> str | None:
    """Store one parsed line in the session's transaction; the new world's id, or ``None`` if the turn
    was already stored."""
    wid = new_world_id()
    row = save_world(s, p.agent_id, p.world, p.signals, world_id=wid, retention=None, enqueued=enqueued)
    return wid if row.id == wid else None


def _import_each(sessions: sessionmaker[Session], lines: Iterable[str | bytes], agent: str | None,
                 enqueued: bool, report: ImportReport) -> None:
    """One transaction per line: a bad line is skipped, the others are stored."""
    for n, text in enumerate(lines, start=1):
        if _blank(text):
            continue
        try:
            parsed = parse_line(text, n, agent)
            with sessions.begin() as s:
                wid = _store_in(s, parsed, enqueued=enqueued)
        except _LINE_ERRORS as exc:
            report.errors.append(LineError(n, _reason(exc)))
            continue
        report.stored(parsed, wid)


def _import_atomic(sessions: sessionmaker[Session], lines: Iterable[str | bytes], agent: str | None,
                   enqueued: bool, report: ImportReport) -> None:
    """Every line in one transaction; after the first bad line the rest are only checked (for the
    report) and nothing is committed."""
    report.atomic = True
    with sessions() as s:
        for n, text in enumerate(lines, start=1):
            if _blank(text):
                continue
            try:
                parsed = parse_line(text, n, agent)
                if report.errors:
                    continue
                wid = _store_in(s, parsed, enqueued=enqueued)
            except _LINE_ERRORS as exc:
                if not report.errors:
                    s.rollback()
                report.errors.append(LineError(n, _reason(exc)))
                continue
            report.stored(parsed, wid)
        if report.errors:
            s.rollback()
            report.committed = False
            report.imported = report.existing = 0
            report.agents.clear()
        else:
            s.commit()


def import_lines(
    sessions: sessionmaker[Session],
    lines: Iterable[str | bytes],
    *,
    agent: str | None = None,
    retention: int = 60,
    enqueued: bool = True,
    atomic: bool = False,
) -> ImportReport:
    """Import worlds file lines (module docstring); blank lines are ignored.

    Args:
        sessions: the database.
        lines: the file's lines, as bytes (:func:`read_lines`) or text.
        agent: store every line under this agent (``--agent``), else each line's ``agent_id``.
        retention: worlds kept per agent afterwards (``RSI_WORLD_RETENTION``).
        enqueued: store the worlds as handed off (no sweeper trigger); False with ``--trigger``.
        atomic: store every line in one transaction, or none when a line is bad (``--atomic``).

    Raises:
        sqlalchemy.exc.OperationalError: the database failed (not a property of a line).
    """
    report = ImportReport()
    (_import_atomic if atomic else _import_each)(sessions, lines, agent, enqueued, report)
    for agent_id in report.agents:
        with sessions.begin() as s:
            lock_agent(s, agent_id)
            report.removed_by_retention += retain_worlds(s, agent_id, retention)
    return report


def trigger_imported(
    sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher, report: ImportReport
) -> None:
    """Trigger each agent with new worlds once, for its newest world (``--trigger``); fills
    ``report.triggered``. Worlds of a handed-off or frozen agent are marked enqueued."""
    for agent_id, ids in report.agents.items():
        with sessions() as s:
            frozen = get_agent(s, agent_id).frozen
            newest = load_latest_worlds(s, agent_id, 1)
            io = str(newest[0].io_id) if newest else None
            s.commit()
        outcome = "frozen"
        if not frozen and io is not None:
            handoff = trigger_consolidation(coord, dispatcher, agent_id, io)
            outcome = handoff.outcome
        if outcome != "deferred":
            with sessions.begin() as s:
                mark_enqueued(s, ids)
        report.triggered[agent_id] = outcome
