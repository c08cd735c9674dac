"""The worlds file of ``rsi worlds export`` / ``rsi worlds import``: JSON Lines, one stored turn a line.

Line format (keys in this order; the world itself is versioned by its ``schema``, ``rsi-world/1``)::

    {"agent_id": str, "io_id": str, "interaction_id": str, "seq": int, "world": {...}, "signals": {...}}

An export lists one agent's stored worlds oldest first (newest last: ``clock``, then ``seq``), so an
import in file order numbers ``seq`` the same way again (``seq`` is recomputed on import, SPEC §4 —
the line's ``seq`` is informational and only type-checked).

**Import** checks every line on its own; a bad line is reported with its number (from 1) and reason
and skipped, the others are stored:

* malformed JSON, a line that is not an object, unknown keys, a missing ``world`` or agent id;
* the world and the explicit signals get exactly the host-side checks of
  :func:`rsi_common.host_input.parse_turn`: :func:`~rsi_common.world.finalize_world` (schema
  validation naming the field, clipping, size limit) and the **credential refusal**; the line's
  ``io_id`` / ``interaction_id`` must agree with the world's;
* ``signals.implicit`` (written by an earlier consolidation) is kept — an import restores data this
  system produced — after a shape and credential check; the host API itself never accepts it.

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
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.coord import Coordinator
from rsi_common.credentials import find_credentials
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
from rsi_common.errors import CredentialError, InvalidInput, WorldError
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
    labels = find_credentials(json.dumps(value, ensure_ascii=False))
    if labels:
        raise CredentialError(f"signals.implicit: looks like a credential ({', '.join(labels)}); refused")
    return dict(value)


def _check_ids(obj: Mapping[str, Any], world: Mapping[str, Any]) -> None:
    for key in ("io_id", "interaction_id"):
        given = obj.get(key)
        if given is None:
            continue
        if not isinstance(given, str):
            raise InvalidInput(f"{key}: must be a string, got {type(given).__name__}")
        if given != str(world.get(key) or ""):
            raise InvalidInput(f"{key}: the line says {given!r}, the world says {world.get(key)!r}")
    seq = obj.get("seq")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 1):
        raise InvalidInput(f"seq: must be a positive integer, got {seq!r}")


def parse_line(text: str, line_no: int, agent: str | None = None) -> ParsedLine:
    """Check one line (module docstring). ``agent`` (``--agent``) overrides the line's agent id.

    Raises:
        InvalidInput: the line is malformed; ``WorldError`` / ``CredentialError`` for the world.
        json.JSONDecodeError: the line is not JSON.
    """
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise InvalidInput(f"a line must be a JSON object, got {type(obj).__name__}")
    unknown = sorted(str(k) for k in obj if k not in LINE_KEYS)
    if unknown:
        raise InvalidInput(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(LINE_KEYS)}")
    agent_id = agent or obj.get("agent_id")
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise InvalidInput("agent_id: missing (pass --agent to import lines without one)")
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
    if isinstance(exc, json.JSONDecodeError):
        return f"malformed JSON: {exc.msg} (column {exc.colno})"
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
        }


def _store(sessions: sessionmaker[Session], p: ParsedLine, *, enqueued: bool) -> str | None:
    """Store one parsed line; the new world's id, or ``None`` if the turn was already stored."""
    wid = new_world_id()
    with sessions.begin() as s:
        row = save_world(s, p.agent_id, p.world, p.signals, world_id=wid, retention=None, enqueued=enqueued)
        return wid if row.id == wid else None


def import_lines(
    sessions: sessionmaker[Session],
    lines: Iterable[str],
    *,
    agent: str | None = None,
    retention: int = 60,
    enqueued: bool = True,
) -> ImportReport:
    """Import worlds file lines (module docstring); blank lines are ignored.

    Args:
        sessions: the database.
        lines: the file's lines.
        agent: store every line under this agent (``--agent``), else each line's ``agent_id``.
        retention: worlds kept per agent afterwards (``RSI_WORLD_RETENTION``).
        enqueued: store the worlds as handed off (no sweeper trigger); False with ``--trigger``.

    Raises:
        sqlalchemy.exc.OperationalError: the database failed (not a property of a line).
    """
    report = ImportReport()
    for n, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            parsed = parse_line(text, n, agent)
            wid = _store(sessions, parsed, enqueued=enqueued)
        except (ValueError, IntegrityError, DataError) as exc:  # InvalidInput and JSONDecodeError too
            report.errors.append(LineError(n, _reason(exc)))
            continue
        if wid is None:
            report.existing += 1
            continue
        report.imported += 1
        report.agents.setdefault(parsed.agent_id, []).append(wid)
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
