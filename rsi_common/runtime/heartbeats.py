"""Heartbeats (docs/runtime/goals.md#heartbeats): ``rsi_schedules`` rows that post
``[heartbeat <label>] <instruction>`` to an agent's session every ``every_s ≥ 60`` seconds or on a
5-field UTC cron (``cronsim``). Only operators and hosts create them; agents cannot.

:func:`fire_due` is called by ``rsi.tick`` with the database clock (tests pass a fake one). For
each due row it advances ``next_at`` by compare-and-set, ``UPDATE … SET next_at=:next WHERE id=:id
AND next_at=:old``; only the winner inserts the message, keyed ``hb:{id}:{old}`` (epoch seconds), so
two tickers deliver once. ``next_at`` is the first fire time after *now*, so missed ticks merge
(downtime → one fire), and a heartbeat whose last message is still unconsumed only advances.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from cronsim import CronSim, CronSimError
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db.runtime_models import AgentRuntimeRow, MessageRow, ScheduleRow
from rsi_common.errors import InvalidInput
from rsi_common.runtime.host_checks import check_text_field
from rsi_common.runtime.ids import new_id
from rsi_common.runtime.tree import add_event, get_runtime

__all__ = ["MIN_EVERY_S", "add_heartbeat", "claim_beat", "due", "fire_due", "heartbeat_json", "next_fire",
           "update_heartbeat"]

MIN_EVERY_S = 60
MAX_EVERY_S = 366 * 86_400
MAX_INSTRUCTION_CHARS = 16_384
_LABEL = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_CRON_ERROR = "cron must be a 5-field UTC cron expression (minute hour day month weekday)"
_SESSION = re.compile(r"[A-Za-z0-9_.:-]{1,255}")


def next_fire(every_s: int | None, cron: str | None, after: datetime) -> datetime:
    """The first fire time strictly after ``after`` (whole UTC seconds)."""
    after = after.replace(microsecond=0)
    if cron is not None:
        return next(CronSim(cron, after))
    assert every_s is not None
    return after + timedelta(seconds=every_s)


def heartbeat_json(row: ScheduleRow) -> dict[str, Any]:
    """A heartbeat as the host API shows it."""
    return {"id": row.id, "agent": row.agent_id, "label": row.label, "instruction": row.instruction,
            "every_s": row.every_s, "cron": row.cron, "session": row.session, "status": row.status,
            "next_at": row.next_at.isoformat()}


def _timing(every_s: Any, cron: Any) -> tuple[int | None, str | None]:
    if (every_s is None) == (cron is None):
        raise InvalidInput("give exactly one of every_s and cron")
    if every_s is not None:
        if (isinstance(every_s, bool) or not isinstance(every_s, int)
                or not MIN_EVERY_S <= every_s <= MAX_EVERY_S):
            raise InvalidInput(f"every_s must be an integer from {MIN_EVERY_S} to {MAX_EVERY_S}")
        return every_s, None
    if not isinstance(cron, str) or len(cron) > 100 or len(cron.split()) != 5:
        raise InvalidInput(_CRON_ERROR)
    try:
        CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError):
        raise InvalidInput(_CRON_ERROR) from None
    return None, " ".join(cron.split())


def _text(value: Any, field: str, limit: int) -> str:
    text = check_text_field(value, field, limit).strip()
    if not text:
        raise InvalidInput(f"{field} must be a non-empty string")
    return text


def _label(value: Any) -> str:
    if not isinstance(value, str) or not _LABEL.fullmatch(value):
        raise InvalidInput("label must match [a-z0-9][a-z0-9_.-]{0,63}")
    return value


def add_heartbeat(s: Session, agent: str, instruction: Any, *, every_s: Any = None, cron: Any = None,
                  label: Any = "heartbeat", session: Any = "main", now: datetime, actor: str) -> ScheduleRow:
    """Create a heartbeat of a cluster agent, first due one period after ``now``.

    Raises:
        InvalidInput: a bad field (named), a deleted agent or a host agent (never woken).
        UnknownAgentError: the agent is not registered.
    """
    text = _text(instruction, "instruction", MAX_INSTRUCTION_CHARS)
    every, expr = _timing(every_s, cron)
    name = _label(label)
    if not isinstance(session, str) or not _SESSION.fullmatch(session):
        raise InvalidInput("session must be 1-255 characters of [A-Za-z0-9_.:-]")
    rt = get_runtime(s, agent)
    if rt.lifecycle == "deleted":
        raise InvalidInput(f"agent {agent!r} is deleted")
    if rt.profile.get("runs_on", "cluster") != "cluster":
        raise InvalidInput(f"agent {agent!r} runs on the host and is never woken; "
                           "heartbeats need runs_on cluster")
    row = ScheduleRow(id=new_id("hb"), agent_id=agent, label=name, instruction=text, every_s=every, cron=expr,
                      session=session, status="active", next_at=next_fire(every, expr, now))
    s.add(row)
    add_event(s, agent, "heartbeat", actor, heartbeat=row.id, to="active", every_s=every, cron=expr)
    s.flush()
    return row


def update_heartbeat(s: Session, heartbeat: str, *, status: Any = None, instruction: Any = None,
                     every_s: Any = None, cron: Any = None, label: Any = None, now: datetime,
                     actor: str) -> ScheduleRow:
    """Pause (``paused``), resume (``active``: next fire one period after ``now``), delete
    (``deleted``), or change the instruction, label or timing (``every_s`` or ``cron``).

    Raises:
        InvalidInput: an unknown or deleted heartbeat, or a bad field (named).
    """
    row = s.get(ScheduleRow, heartbeat) if isinstance(heartbeat, str) else None
    if row is None or row.status == "deleted":
        raise InvalidInput("heartbeat: no such heartbeat")
    if all(v is None for v in (status, instruction, every_s, cron, label)):
        raise InvalidInput("give status, instruction, every_s, cron or label")
    if status is not None and status not in ("active", "paused", "deleted"):
        raise InvalidInput("status must be active, paused or deleted")
    text = _text(instruction, "instruction", MAX_INSTRUCTION_CHARS) if instruction is not None else None
    timing = _timing(every_s, cron) if every_s is not None or cron is not None else None
    name = _label(label) if label is not None else None
    detail: dict[str, Any] = {"heartbeat": row.id}
    if text is not None:
        row.instruction, detail["instruction"] = text, True
    if name is not None:
        row.label = detail["label"] = name
    if timing is not None:
        row.every_s, row.cron = timing
        detail.update({"every_s": row.every_s, "cron": row.cron})
    if timing is not None or (status == "active" and row.status != "active"):
        row.next_at = next_fire(row.every_s, row.cron, now)
    if status is not None and status != row.status:
        detail.update({"from": row.status, "to": status})
        row.status = status
    add_event(s, row.agent_id, "heartbeat", actor, **detail)
    s.flush()
    return row


def fire_due(factory: sessionmaker[Session], now: datetime, *, limit: int = 500) -> list[tuple[str, str]]:
    """Fire the heartbeats due at ``now`` (module docstring); returns the mailboxes to wake."""
    woken = []
    for sid, old in due(factory, now, limit=limit):
        box = claim_beat(factory, sid, old, now)
        if box is not None:
            woken.append(box)
    return woken


def due(factory: sessionmaker[Session], now: datetime, *, limit: int = 500) -> list[tuple[str, datetime]]:
    """``(id, next_at)`` of the active heartbeats due at ``now``, oldest first."""
    with factory() as s:
        return [(str(i), n) for i, n in s.execute(sa.select(ScheduleRow.id, ScheduleRow.next_at).where(
            ScheduleRow.status == "active", ScheduleRow.next_at <= now)
            .order_by(ScheduleRow.next_at).limit(limit)).all()]


def claim_beat(factory: sessionmaker[Session], sid: str, old: datetime, now: datetime
               ) -> tuple[str, str] | None:
    """Claim heartbeat ``sid`` seen due at ``old`` by compare-and-set on ``next_at`` and post its
    message; returns the mailbox to wake, or ``None`` (another ticker won, the last beat is unread, or
    the agent is deleted)."""
    with factory.begin() as s:
        row = s.get(ScheduleRow, sid)
        if row is None:
            return None
        won: Any = s.execute(sa.update(ScheduleRow).where(
            ScheduleRow.id == sid, ScheduleRow.next_at == old, ScheduleRow.status == "active")
            .values(next_at=next_fire(row.every_s, row.cron, now)))
        if not won.rowcount:
            return None
        rt = s.get(AgentRuntimeRow, row.agent_id)
        if rt is None or rt.lifecycle == "deleted":
            s.execute(sa.update(ScheduleRow).where(ScheduleRow.id == sid).values(status="deleted"))
            return None
        unread = s.execute(sa.select(sa.func.count()).select_from(MessageRow).where(
            MessageRow.key.like(f"hb:{sid}:%"), MessageRow.consumed_io.is_(None))).scalar_one()
        if unread:
            return None
        s.add(MessageRow(id=new_id("m"), key=f"hb:{sid}:{int(old.timestamp())}", kind="heartbeat",
                         sender=None, relationship="operator", recipient=row.agent_id, session_id=row.session,
                         text=row.instruction, label=row.label, hops=0, root_id=rt.root_id))
        return row.agent_id, row.session
