"""The record path's SQL: one short transaction per recorded turn, in Core statements built once
(docs/performance/record-path.md has the SQL, the statement count and the reasons).

:func:`record_world_turn` stores a turn with a world; :func:`record_bare_turn` one without (capture
off, own loop). Both run on the caller's connection inside its transaction and never commit:

1. the agent **upsert**: ``INSERT … ON CONFLICT (id) DO UPDATE SET turns = turns + 1 RETURNING``
   creates the agent, takes its row lock (PostgreSQL; on SQLite the transaction already holds the
   database's write lock, ``BEGIN IMMEDIATE``) and returns ``frozen``, ``current_version`` and the new
   ``turns`` — the lock :func:`~rsi_common.db.agents.lock_agent` takes, in the same statement;
2. the world **insert**: ``INSERT … SELECT …, coalesce(max(seq), 0) + 1 … ON CONFLICT (agent_id, io_id)
   DO NOTHING RETURNING id, seq, replayable`` — ``seq`` numbered in the statement under the agent
   lock, idempotent per turn (a repeated ``io_id`` inserts nothing and the rare path reads the row);
3. the trajectory insert (``ON CONFLICT (id) DO NOTHING``);
4. every :data:`RETENTION_EVERY`-th turn of the agent (``turns`` divisible by it): the world and
   trajectory retention deletes. Between two runs at most ``RETENTION_EVERY - 1`` rows of each
   table are kept beyond the bound; the consolidation reads only the latest ``world_pool`` worlds;
5. last, and only when the client has hand-off marks due, :func:`mark_handed_off`: ``UPDATE
   rsi_worlds SET enqueued_at = now`` for the worlds whose trigger was handed off since the last
   flush (the caller runs it).

Run retention is left to :func:`~rsi_common.db.runs.start_run`, which applies it when a run row is
made; the own-loop path, which makes a ``skipped`` run row itself, applies it too.

Statements 1–3 run as SQL compiled once per engine dialect (:mod:`rsi_common.db.plain_sql`) on the
connection's DB-API cursor; the rare ones as Core constructs on the same connection.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.exc import SQLAlchemyError

from rsi_common.db.models import AgentRow, RunRow, TrajectoryRow, WorldRow
from rsi_common.db.plain_sql import PlainStatement, plain
from rsi_common.db.runs import new_run_id, retain_runs
from rsi_common.db.sqltypes import JSONType, db_now
from rsi_common.db.worlds import LATEST_WORLDS, retain_trajectories, retain_worlds
from rsi_common.world import new_world_id

__all__ = [
    "RETENTION_EVERY",
    "AgentTurn",
    "StoredWorld",
    "mark_handed_off",
    "record_bare_turn",
    "record_world_turn",
    "unmarked",
    "warm_record_path",
]

RETENTION_EVERY = 16
"""World and trajectory retention run on every 16th recorded turn of an agent (``turns % 16 == 0``)."""

_W: sa.Table = WorldRow.__table__  # type: ignore[assignment]
_A: sa.Table = AgentRow.__table__  # type: ignore[assignment]
_T: sa.Table = TrajectoryRow.__table__  # type: ignore[assignment]
_R: sa.Table = RunRow.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class AgentTurn:
    """What the agent upsert returned: the agent as locked by this transaction."""

    frozen: bool
    current_version: str | None
    turns: int


@dataclass(frozen=True)
class StoredWorld:
    """The world row of the recorded turn (new, or the one stored for the same ``io_id`` before)."""

    id: str
    io_id: str
    seq: int
    replayable: bool
    new: bool


def _insert(dialect: str) -> Any:
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


@functools.cache
def _statements(dialect: str) -> dict[str, Any]:
    """The record path's statements for one dialect, built once (SQLAlchemy caches their SQL)."""
    insert = _insert(dialect)
    now = db_now()
    upsert = insert(_A).values(
        id=sa.bindparam("agent_id"), frozen=False, state=sa.bindparam("empty_state", type_=JSONType),
        applied_fence=0, turns=1, created_at=now, updated_at=now,
    )
    upsert = upsert.on_conflict_do_update(index_elements=["id"], set_={"turns": _A.c.turns + 1}).returning(
        _A.c.frozen, _A.c.current_version, _A.c.turns)
    cols = ["id", "agent_id", "io_id", "interaction_id", "seq", "harness_version", "model", "provider",
            "world", "signals", "replayable", "clock", "bytes", "created_at", "enqueued_at", "tainted"]
    source = sa.select(
        sa.bindparam("id", type_=sa.String()), sa.bindparam("agent_id", type_=sa.String()),
        sa.bindparam("io_id", type_=sa.String()), sa.bindparam("interaction_id", type_=sa.String()),
        sa.func.coalesce(sa.func.max(_W.c.seq), 0) + 1,
        sa.bindparam("harness_version", type_=sa.String()), sa.bindparam("model", type_=sa.String()),
        sa.bindparam("provider", type_=sa.String()), sa.bindparam("world", type_=JSONType),
        sa.bindparam("signals", type_=JSONType), sa.bindparam("replayable", type_=sa.Boolean()),
        sa.bindparam("clock", type_=sa.Double()), sa.bindparam("bytes", type_=sa.Integer()), now,
        sa.case((sa.bindparam("frozen", type_=sa.Boolean()), now), else_=sa.null()),
        sa.false(),  # tainted: the column's default, bound here so the statement has no Python default
    ).where(_W.c.agent_id == sa.bindparam("agent_id"), _W.c.interaction_id == sa.bindparam("interaction_id"))
    world = (insert(_W).from_select(cols, source)
             .on_conflict_do_nothing(index_elements=["agent_id", "io_id"])
             .returning(_W.c.id, _W.c.seq, _W.c.replayable))
    existing = sa.select(_W.c.id, _W.c.seq, _W.c.replayable).where(
        _W.c.agent_id == sa.bindparam("agent_id"), _W.c.io_id == sa.bindparam("io_id"))
    trajectory = insert(_T).values(created_at=now).on_conflict_do_nothing(index_elements=["id"])
    every_field = insert(_T).values(
        {"id": sa.bindparam("id", type_=_T.c.id.type), "created_at": now,
         **{k: sa.bindparam(k, type_=_T.c[k].type) for k in _TRAJECTORY_FIELDS}},
    ).on_conflict_do_nothing(index_elements=["id"])
    free = (sa.select(_W.c.id)
            .where(_W.c.id.in_(sa.bindparam("ids", expanding=True)), _W.c.enqueued_at.is_(None))
            .with_for_update(skip_locked=True))  # PostgreSQL: never waits; SQLite: one writer, no clause
    mark = sa.update(_W).where(_W.c.id.in_(free.scalar_subquery())).values(enqueued_at=now)
    skipped = sa.insert(_R).values(started_at=now, finished_at=now)
    # the amortised retention: retain_worlds' and retain_trajectories' statements, keep bound
    agent, keep = sa.bindparam("agent_id", type_=sa.String()), sa.bindparam("keep", type_=sa.Integer())
    kept_worlds = sa.select(_W.c.id).where(_W.c.agent_id == agent).order_by(*LATEST_WORLDS).limit(keep)
    kept_traj = (sa.select(_T.c.id).where(_T.c.agent_id == agent)
                         .order_by(_T.c.created_at.desc(), _T.c.id.desc()).limit(keep))
    retain_w = sa.delete(_W).where(_W.c.agent_id == agent, _W.c.id.not_in(kept_worlds.scalar_subquery()))
    retain_t = sa.delete(_T).where(_T.c.agent_id == agent, _T.c.id.not_in(kept_traj.scalar_subquery()))
    return {"upsert": upsert, "world": world, "existing": existing, "trajectory": trajectory, "mark": mark,
            "skipped": skipped, "trajectory_all": every_field, "retain_worlds": retain_w,
            "retain_trajectories": retain_t}


_TRAJECTORY_FIELDS = tuple(c.key for c in _T.columns if c.key not in ("id", "created_at"))

_PLAIN = ("upsert", "world", "trajectory_all", "retain_worlds", "retain_trajectories")
"""The steady statements run as compiled driver SQL where the dialect allows (:mod:`.plain_sql`)."""

_plain_cache: weakref.WeakKeyDictionary[Dialect, dict[str, PlainStatement]] = weakref.WeakKeyDictionary()


def _plain_statements(dialect: Dialect) -> dict[str, PlainStatement]:
    """The :data:`_PLAIN` statements compiled for this engine's dialect (its JSON serialiser
    included); a statement that cannot be compiled so is left out (Core runs it)."""
    found = _plain_cache.get(dialect)
    if found is None:
        st = _statements(dialect.name)
        compiled = {name: plain(st[name], dialect) for name in _PLAIN}
        found = {k: v for k, v in compiled.items() if v is not None}
        _plain_cache[dialect] = found
    return found


def warm_record_path(engine: Engine) -> bool:
    """Compile the steady statements for ``engine`` (:func:`_plain_statements`) before its first
    record transaction, so their compilation (~13 ms of CPU idle, once per process) is not done under
    SQLite's write turn, where every writer of the database waits for it
    (docs/performance/record-path.md#the-loadtest-tail). One connection is checked out first (the
    dialect reads the server's version on the first connect). ``False`` when the database cannot
    be reached: the first transaction then compiles them, as before."""
    try:
        with engine.connect():
            pass
    except SQLAlchemyError:
        return False
    _plain_statements(engine.dialect)
    return True


def _execute(conn: Connection, name: str, params: Mapping[str, Any]) -> list[Any]:
    """Run one of the record path's statements: compiled driver SQL when there is one, else Core;
    the rows it returned (indexed by position)."""
    fast = _plain_statements(conn.dialect).get(name)
    if fast is not None:
        return fast.run(conn, params)
    result = conn.execute(_statements(conn.dialect.name)[name], dict(params))
    return list(result) if result.returns_rows else []


def _trajectory_default(key: str) -> Any:
    """What the trajectory column ``key`` gets when the record has no value: its Python default
    (``{}``, ``[]``, ``0``) or ``None`` (SQL ``NULL``) — what the Core insert without it stores."""
    default = _T.c[key].default
    if default is None:
        return None
    arg = getattr(default, "arg", None)
    return arg(None) if callable(arg) else arg


_CONSTANT_DEFAULTS = {k: _trajectory_default(k) for k in _TRAJECTORY_FIELDS
                      if not isinstance(_trajectory_default(k), (dict, list))}
"""The trajectory defaults that can be shared between calls (``None``, numbers); a ``{}`` or ``[]``
default is made anew per call (:func:`_trajectory_default`)."""


def mark_handed_off(conn: Connection, world_ids: Sequence[str]) -> int:
    """Set ``enqueued_at`` (database clock) on the given worlds that have none; returns the count.

    A world whose row another transaction holds (PostgreSQL) is skipped, not waited for: a record
    transaction runs this last and never waits with the rows it marked locked, so it cannot close a
    lock cycle. When the count falls short, :func:`unmarked` names the worlds to mark again (the
    client puts them back in its queue); a world never marked is triggered once more by the sweeper
    (harmless).
    """
    if not world_ids:
        return 0
    result = conn.execute(_statements(conn.dialect.name)["mark"], {"ids": list(world_ids)})
    return int(result.rowcount or 0)


def unmarked(conn: Connection, world_ids: Sequence[str]) -> list[str]:
    """Those of ``world_ids`` that still exist without ``enqueued_at`` (a mark skipped because its
    row was locked); a world removed by retention or marked already is not among them."""
    if not world_ids:
        return []
    rows = conn.execute(sa.select(_W.c.id).where(_W.c.id.in_(list(world_ids)), _W.c.enqueued_at.is_(None)))
    return [str(r.id) for r in rows]


def _upsert_agent(conn: Connection, agent_id: str) -> AgentTurn:
    (frozen, version, turns), = _execute(conn, "upsert", {"agent_id": agent_id, "empty_state": {}})
    return AgentTurn(bool(frozen), version, int(turns))


def _save_trajectory(conn: Connection, record: Mapping[str, Any]) -> None:
    """Insert the trajectory (``trajectory_id`` the key; a stored one is left as it is)."""
    values = {k: record[k] for k in _TRAJECTORY_FIELDS if record.get(k) is not None}
    if "error" in values:
        values["error"] = str(values["error"])[:300]
    values["id"] = str(record["trajectory_id"])
    if "trajectory_all" in _plain_statements(conn.dialect):  # every column bound: the defaults here
        every = {k: values[k] if k in values else _CONSTANT_DEFAULTS[k] if k in _CONSTANT_DEFAULTS
                 else _trajectory_default(k) for k in _TRAJECTORY_FIELDS}
        _execute(conn, "trajectory_all", {"id": values["id"], **every})
        return
    conn.execute(_statements(conn.dialect.name)["trajectory"], values)


def _retain(conn: Connection, agent_id: str, agent: AgentTurn, world_retention: int | None,
            trajectory_retention: int | None, every: int) -> None:
    if agent.turns % every:
        return
    # compiled once like the steady statements (a Core delete compiled on the first 16th turn of the
    # process held the write turn for it: docs/performance/record-path.md#the-loadtest-tail)
    fast = _plain_statements(conn.dialect)
    if world_retention is not None:
        if world_retention < 0 or "retain_worlds" not in fast:
            retain_worlds(conn, agent_id, world_retention)  # its error, or Core
        else:
            fast["retain_worlds"].run(conn, {"agent_id": agent_id, "keep": world_retention})
    if trajectory_retention is not None:
        if "retain_trajectories" not in fast:
            retain_trajectories(conn, agent_id, trajectory_retention)
        else:
            keep = max(0, trajectory_retention)
            fast["retain_trajectories"].run(conn, {"agent_id": agent_id, "keep": keep})


def record_world_turn(
    conn: Connection,
    agent_id: str,
    world: Mapping[str, Any],
    signals: Mapping[str, Any],
    trajectory: Mapping[str, Any] | None,
    *,
    world_retention: int | None,
    trajectory_retention: int | None,
    retention_every: int = RETENTION_EVERY,
) -> tuple[AgentTurn, StoredWorld]:
    """Store one turn with its world (module docstring): the agent upsert, the world insert, the
    trajectory, and every :data:`RETENTION_EVERY`-th turn the retention.

    The world is stored with ``enqueued_at`` set when the agent is frozen (no trigger is due); a
    world stored before for the same ``io_id`` is returned as it is (marked too when frozen).

    Args:
        conn: a connection inside the caller's transaction.
        agent_id: the agent (valid id: the caller checked the input boundary).
        world: the finalized world (``rsi_common.world.finalize_world``).
        signals: the checked initial signals.
        trajectory: the checked trajectory record, or ``None``.
        world_retention, trajectory_retention: rows kept per agent (``None``: no retention).
        retention_every: the retention runs when the agent's ``turns`` is a multiple of it.
    """
    st = _statements(conn.dialect.name)
    agent = _upsert_agent(conn, agent_id)
    io, conversation = str(world["io_id"]), str(world.get("interaction_id") or "")
    params = {
        "id": new_world_id(), "agent_id": agent_id, "io_id": io, "interaction_id": conversation,
        "harness_version": _opt_str(world, "harness_version"), "model": _opt_str(world, "model"),
        "provider": _opt_str(world, "provider"), "world": world, "signals": dict(signals),
        "replayable": bool(world.get("replayable", True)), "clock": float(world["clock"]),
        "bytes": int(world.get("bytes") or 0), "frozen": agent.frozen,
    }
    rows = _execute(conn, "world", params)
    if rows:
        (world_id, seq, replayable), = rows
        stored = StoredWorld(world_id, io, int(seq), bool(replayable), True)
    else:  # the turn was recorded before: idempotent
        old = conn.execute(st["existing"], {"agent_id": agent_id, "io_id": io}).one()
        stored = StoredWorld(old.id, io, int(old.seq), bool(old.replayable), False)
        if agent.frozen:  # no trigger is due; also for a turn first saved before the freeze
            mark_handed_off(conn, [stored.id])
    if trajectory is not None:
        _save_trajectory(conn, trajectory)
    _retain(conn, agent_id, agent, world_retention, trajectory_retention, retention_every)
    return agent, stored


def record_bare_turn(
    conn: Connection,
    agent_id: str,
    trajectory: Mapping[str, Any] | None,
    *,
    skipped_reason: str | None,
    io_id: str | None,
    trajectory_retention: int | None,
    run_retention: int | None,
    retention_every: int = RETENTION_EVERY,
) -> AgentTurn:
    """Store a turn without a world: the agent upsert, the trajectory, and for an own-loop turn
    (``skipped_reason`` given) one finished ``skipped`` run row (docs/algorithm/consolidation.md §3.12.4)
    with the run retention."""
    st = _statements(conn.dialect.name)
    agent = _upsert_agent(conn, agent_id)
    if trajectory is not None:
        _save_trajectory(conn, trajectory)
    if skipped_reason is not None:
        conn.execute(st["skipped"], {
            "id": new_run_id(), "agent_id": agent_id, "kind": "consolidate", "io_id": io_id,
            "status": "skipped", "reason": skipped_reason, "start_version": agent.current_version,
            "fence": None, "result": {"status": "skipped", "reason": skipped_reason},
        })
        if run_retention is not None:
            retain_runs(conn, agent_id, run_retention)
    _retain(conn, agent_id, agent, None, trajectory_retention, retention_every)
    return agent


def _opt_str(world: Mapping[str, Any], key: str) -> str | None:
    value = world.get(key)
    return None if value is None else str(value)

