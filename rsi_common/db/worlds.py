"""Worlds (recorded turns) and trajectories: save with ``seq`` numbering and retention, signals,
latest-worlds pool, and the sweeper's view of worlds whose trigger was never handed off.

Every function runs inside the caller's transaction and never commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from rsi_common.boundary import check_id
from rsi_common.credentials import safe_repr
from rsi_common.db.agents import ensure_agent, lock_agent
from rsi_common.db.models import AgentRow, TrajectoryRow, WorldRow
from rsi_common.db.sqltypes import db_ago, db_now
from rsi_common.errors import InvalidInput
from rsi_common.world import new_world_id

__all__ = [
    "LATEST_WORLDS",
    "get_world",
    "load_latest_worlds",
    "lock_agent_before_worlds",
    "mark_enqueued",
    "retain_trajectories",
    "retain_worlds",
    "save_trajectory",
    "save_world",
    "trajectories",
    "unenqueued_worlds",
    "update_signals",
    "world_by_io",
    "world_texts",
]

_LATEST = (WorldRow.clock.desc(), WorldRow.seq.desc(), WorldRow.id.desc())
LATEST_WORLDS = _LATEST
"""The order of an agent's latest worlds (retention keeps the first ``keep``)."""


def _opt_str(world: Mapping[str, Any], key: str) -> str | None:
    value = world.get(key)
    return None if value is None else str(value)


def save_world(
    session: Session,
    agent_id: str,
    world: Mapping[str, Any],
    signals: Mapping[str, Any] | None = None,
    *,
    world_id: str | None = None,
    io_id: str | None = None,
    interaction_id: str | None = None,
    retention: int | None = 60,
    enqueued: bool = False,
) -> WorldRow:
    """Store one turn's world and apply the agent's world retention.

    The agent is created if absent, then locked (:func:`~rsi_common.db.agents.lock_agent`), so the
    ``seq`` computation and the retention are serialised per agent on both backends.
    ``seq`` = 1 + the highest stored ``seq`` of the agent in the same conversation
    (``interaction_id``), 1 for a conversation's first stored world. Idempotent per turn: when the
    agent already has a world with this ``io_id``, that row is returned and nothing is written.

    Args:
        session: session inside a transaction.
        agent_id: the agent.
        world: the finalized ``rsi-world/1`` record (``rsi_common.world.finalize_world``); its
            ``io_id``, ``interaction_id``, ``harness_version``, ``model``, ``provider``,
            ``replayable`` (default true), ``clock`` (required, epoch seconds) and ``bytes``
            fill the row's columns.
        signals: initial signals (default ``{}``).
        world_id: the row id (default: :func:`rsi_common.world.new_world_id`).
        io_id, interaction_id: override the record's fields.
        retention: keep this many latest worlds of the agent (by ``clock`` desc, ``seq`` desc);
            ``None`` = no retention. The new world itself may fall out if it is older than all kept.
        enqueued: set ``enqueued_at`` now (nothing left to trigger for this world).

    Returns:
        The stored row (``created_at`` filled by the database clock).

    Raises:
        InvalidInput: no ``io_id``, no numeric ``clock``, or the record names another agent.
        InputLimitError: an id breaks the id grammar (checked before the database sees it).
    """
    if world.get("agent_id") not in (None, agent_id):
        raise InvalidInput(f"world names agent {safe_repr(world.get('agent_id'))}, not {safe_repr(agent_id)}")
    io = io_id if io_id is not None else _opt_str(world, "io_id")
    if not io:
        raise InvalidInput("a world needs an io_id (the host's turn id)")
    clock = world.get("clock")
    if isinstance(clock, bool) or not isinstance(clock, int | float):
        raise InvalidInput(f"world clock must be epoch seconds, got {type(clock).__name__}")
    conversation = interaction_id if interaction_id is not None else str(world.get("interaction_id") or "")
    check_id(io, "io_id")
    check_id(conversation, "interaction_id", empty_ok=True)
    ensure_agent(session, agent_id)
    lock_agent(session, agent_id)
    existing = world_by_io(session, agent_id, io)
    if existing is not None:
        return existing
    top = session.execute(
        sa.select(sa.func.max(WorldRow.seq)).where(
            WorldRow.agent_id == agent_id, WorldRow.interaction_id == conversation
        )
    ).scalar_one_or_none()
    row = WorldRow(
        id=world_id or new_world_id(),
        agent_id=agent_id,
        io_id=io,
        interaction_id=conversation,
        seq=(top or 0) + 1,
        harness_version=_opt_str(world, "harness_version"),
        model=_opt_str(world, "model"),
        provider=_opt_str(world, "provider"),
        world=dict(world),
        signals=dict(signals or {}),
        replayable=bool(world.get("replayable", True)),
        clock=float(clock),
        bytes=int(world.get("bytes") or 0),
    )
    if enqueued:
        row.enqueued_at = db_now()
    session.add(row)
    session.flush()
    session.refresh(row)  # read back the values the database clock filled in
    if retention is not None:
        retain_worlds(session, agent_id, retention)
    return row


def retain_worlds(session: Session | Connection, agent_id: str, keep: int) -> int:
    """Delete the agent's worlds beyond the ``keep`` latest (``clock`` desc, ``seq`` desc).

    The caller holds the agent lock. Returns the number of deleted rows.
    """
    if keep < 0:
        raise ValueError("keep must be >= 0")
    kept = sa.select(WorldRow.id).where(WorldRow.agent_id == agent_id).order_by(*_LATEST).limit(keep)
    result = session.execute(
        sa.delete(WorldRow)
        .where(WorldRow.agent_id == agent_id, WorldRow.id.not_in(kept.scalar_subquery()))
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def get_world(session: Session, world_id: str) -> WorldRow | None:
    """The world row with this id, or ``None`` (never stored, or removed by retention)."""
    return session.get(WorldRow, world_id, populate_existing=True)


def world_by_io(session: Session, agent_id: str, io_id: str) -> WorldRow | None:
    """The agent's world of the turn ``io_id``, or ``None``."""
    return session.execute(
        sa.select(WorldRow)
        .where(WorldRow.agent_id == agent_id, WorldRow.io_id == io_id)
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def lock_agent_before_worlds(session: Session, agent_id: str) -> None:
    """On PostgreSQL, lock the agent's row before a world of it is written: the pool-epoch triggers
    update the agent row on every world write, and the record path locks the agent before it inserts
    and deletes worlds, so a writer that locked a world first could deadlock with it
    (docs/performance/consolidation.md#the-no-signal-path). SQLite serialises writers: no statement."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(sa.select(AgentRow.id).where(AgentRow.id == agent_id).with_for_update())


def update_signals(
    session: Session,
    agent_id: str,
    signals: Mapping[str, Any],
    *,
    world_id: str | None = None,
    io_id: str | None = None,
    replace: bool = False,
) -> WorldRow | None:
    """Merge ``signals`` into one world's signals (top-level keys replace), or replace them all.

    Exactly one of ``world_id`` / ``io_id`` names the world. The world row is locked
    (``FOR UPDATE`` on PostgreSQL) so the host's explicit signals and a run's ``implicit`` signal
    written concurrently never lose each other.

    Returns:
        The updated row, or ``None`` if the agent has no such world (e.g. removed by retention).

    Raises:
        InvalidInput: neither or both of ``world_id`` / ``io_id`` given.
    """
    if (world_id is None) == (io_id is None):
        raise InvalidInput("give exactly one of world_id or io_id")
    lock_agent_before_worlds(session, agent_id)
    where = WorldRow.id == world_id if world_id is not None else WorldRow.io_id == io_id
    row = session.execute(
        sa.select(WorldRow)
        .where(WorldRow.agent_id == agent_id, where)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if row is None:
        return None
    merged = {} if replace else dict(row.signals or {})
    merged.update(signals)
    row.signals = merged
    session.flush()
    return row


def load_latest_worlds(session: Session, agent_id: str, n: int) -> list[WorldRow]:
    """The agent's ``n`` latest worlds, newest first (``clock`` desc, then ``seq`` desc, then id)."""
    return list(
        session.execute(
            sa.select(WorldRow)
            .where(WorldRow.agent_id == agent_id)
            .order_by(*_LATEST)
            .limit(max(0, n))
            .execution_options(populate_existing=True)
        ).scalars()
    )


WORLD_HEAD_COLUMNS = (WorldRow.id, WorldRow.io_id, WorldRow.interaction_id, WorldRow.seq, WorldRow.clock,
                      WorldRow.replayable, WorldRow.signals, WorldRow.harness_version, WorldRow.model,
                      WorldRow.provider)
"""Every column of a world row except the (large) record itself."""


def load_latest_heads(
    session: Session | Connection, agent_id: str, n: int, *, signals_text: bool = False
) -> list[sa.Row[Any]]:
    """Like :func:`load_latest_worlds` without the ``world`` record: a consolidation decides most
    runs from the signals alone and reads records only for the worlds it needs.

    With ``signals_text`` the ``signals`` column comes back as its stored JSON text, undecoded, so
    the caller can decode each row on its own and skip a bad one (:mod:`rsi_common.stored`). On a
    :class:`Connection` the read skips the ORM's execution (no autoflush), the same rows.

    Tainted worlds (``rsi_worlds.tainted``) are left out: they never enter W, the proposer's views,
    the critic's patterns or the pairing (docs/runtime/refine.md#taint).
    """
    cols: list[Any] = list(WORLD_HEAD_COLUMNS)
    if signals_text:
        cols = [c for c in cols if c.key != "signals"] + [sa.cast(WorldRow.signals, sa.Text).label("signals")]
    return list(
        session.execute(
            sa.select(*cols).where(WorldRow.agent_id == agent_id, WorldRow.tainted.is_(False))
            .order_by(*_LATEST).limit(max(0, n))
        )
    )


def world_texts(session: Session | Connection, world_ids: Iterable[str]) -> dict[str, str | None]:
    """The ``world`` records of the given ids as their stored JSON text, undecoded (ids no longer
    stored are left out); see :func:`load_latest_heads` ``signals_text``."""
    ids = list(world_ids)
    if not ids:
        return {}
    stmt = sa.select(WorldRow.id, sa.cast(WorldRow.world, sa.Text)).where(WorldRow.id.in_(ids))
    rows = session.execute(stmt)
    return {row[0]: row[1] for row in rows}


def world_records(session: Session, world_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The ``world`` records of the given ids (ids no longer stored are left out)."""
    ids = list(world_ids)
    if not ids:
        return {}
    rows = session.execute(sa.select(WorldRow.id, WorldRow.world).where(WorldRow.id.in_(ids)))
    return {row.id: dict(row.world or {}) for row in rows}


def mark_enqueued(session: Session, world_ids: Iterable[str]) -> int:
    """Set ``enqueued_at`` (database clock) on the given worlds that have none; returns the count."""
    ids = list(world_ids)
    if not ids:
        return 0
    result = session.execute(
        sa.update(WorldRow)
        .where(WorldRow.id.in_(ids), WorldRow.enqueued_at.is_(None))
        .values(enqueued_at=db_now())
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def unenqueued_worlds(session: Session, *, grace_s: float = 60.0, limit: int = 1000) -> list[WorldRow]:
    """Worlds whose trigger was never handed off, saved more than ``grace_s`` ago (database clock).

    The grace period keeps the sweeper away from turns whose ``record_turn`` is still between
    saving and enqueueing. Ordered by agent, then oldest first; the sweeper triggers each agent
    once (its newest such world) and marks them all with :func:`mark_enqueued`.
    """
    return list(
        session.execute(
            sa.select(WorldRow)
            .where(WorldRow.enqueued_at.is_(None), WorldRow.created_at < db_ago(grace_s))
            .order_by(WorldRow.agent_id, WorldRow.clock, WorldRow.seq)
            .limit(max(0, limit))
        ).scalars()
    )


_TRAJECTORY_FIELDS = tuple(
    c.key for c in TrajectoryRow.__table__.columns if c.key not in ("id", "created_at")
)


def save_trajectory(
    session: Session, record: Mapping[str, Any], *, retention: int | None = None
) -> TrajectoryRow:
    """Store a turn's trajectory record (docs/formats.md §7.5; ``trajectory_id`` is the key, unknown keys
    ignored).

    Idempotent: an already stored ``trajectory_id`` returns the stored row. With ``retention``, only
    the agent's latest ``retention`` trajectories are kept.

    Raises:
        InvalidInput: no ``trajectory_id`` or ``agent_id``.
    """
    tid, agent_id = record.get("trajectory_id"), record.get("agent_id")
    if not tid or not agent_id:
        raise InvalidInput("a trajectory record needs trajectory_id and agent_id")
    ensure_agent(session, str(agent_id))
    lock_agent(session, str(agent_id))
    existing = session.get(TrajectoryRow, str(tid))
    if existing is not None:
        return existing
    values = {k: record[k] for k in _TRAJECTORY_FIELDS if record.get(k) is not None}
    if "error" in values:
        values["error"] = str(values["error"])[:300]
    row = TrajectoryRow(id=str(tid), **values)
    session.add(row)
    session.flush()
    if retention is not None:
        retain_trajectories(session, str(agent_id), retention)
    return row


def retain_trajectories(session: Session | Connection, agent_id: str, keep: int) -> int:
    """Delete the agent's trajectories beyond the ``keep`` newest; returns the count."""
    kept = (
        sa.select(TrajectoryRow.id)
        .where(TrajectoryRow.agent_id == agent_id)
        .order_by(TrajectoryRow.created_at.desc(), TrajectoryRow.id.desc())
        .limit(max(0, keep))
    )
    result = session.execute(
        sa.delete(TrajectoryRow)
        .where(TrajectoryRow.agent_id == agent_id, TrajectoryRow.id.not_in(kept.scalar_subquery()))
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def trajectories(session: Session, agent_id: str, limit: int = 100) -> list[TrajectoryRow]:
    """The agent's latest trajectories, newest first."""
    return list(
        session.execute(
            sa.select(TrajectoryRow)
            .where(TrajectoryRow.agent_id == agent_id)
            .order_by(TrajectoryRow.created_at.desc(), TrajectoryRow.id.desc())
            .limit(max(0, limit))
        ).scalars()
    )
