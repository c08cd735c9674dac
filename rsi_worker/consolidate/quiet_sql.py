"""The no-signal fast path's SQL, built once per dialect
(docs/performance/consolidation.md#the-no-signal-path).

Every statement of :mod:`rsi_worker.consolidate.quiet` takes its values as bind parameters, so one
statement object per dialect serves every run: SQLAlchemy's coercion and operator lookup run once,
not on every call (about a quarter of the run's CPU when each call built its own statements), and the
compiled SQL is found in the engine's cache. They run on a plain :class:`~sqlalchemy.engine.Connection`
(no ORM session: nothing is flushed, nothing is tracked).

* ``agent``: ``frozen``, ``current_version``, ``applied_fence``, ``state`` (as its stored JSON text,
  undecoded: ``quiet._state`` decodes a text once per process), ``pool_epoch``, ``pool_floor`` and
  ``created_at`` (:mod:`~rsi_worker.consolidate.pool_memo`) of ``:agent_id`` and whether a run row
  exists at ``:fence`` (one statement);
* ``pool``: the ``:n`` latest untainted worlds of ``:agent_id`` without their record, ``signals`` as its
  stored text — the rows and order of ``rsi_common.db.load_latest_heads(..., signals_text=True)``;
* ``changed``: the same columns and ``tainted`` of the worlds of ``:agent_id`` stamped after ``:since``
  (index ``(agent_id, stamp)``: the rows a process's pool memo has not seen);
* ``swap`` / ``swap_state``: the fenced compare-and-swap on the agent (``applied_fence = :fence``
  [and ``state = :state``] where ``applied_fence = :expected``);
* ``merge``: the unconditional update after a re-read under the lock;
* ``relock``: the agent's ``applied_fence`` and ``state`` re-read under the lock;
* ``insert``: the finished run row, ``ON CONFLICT (agent_id, fence) DO NOTHING``.

The steady statements (:data:`PLAIN`: the two reads, the compare-and-swap, the insert) run as driver
SQL compiled once per engine dialect where the dialect has positional parameters (SQLite;
:mod:`rsi_common.db.plain_sql`, as the record path's): no compile-cache lookup, no typed result. Their
rows then come back as the driver returns them (``0``/``1`` for a boolean: callers convert); the Core
constructs run otherwise (PostgreSQL).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, CursorResult, Dialect

from rsi_common.db.driver_count import run_count
from rsi_common.db.models import AgentRow, RunRow, WorldRow
from rsi_common.db.plain_sql import PlainStatement, plain
from rsi_common.db.sqltypes import JSONType, db_now
from rsi_common.db.worlds import WORLD_HEAD_COLUMNS

__all__ = ["PLAIN", "QuietStatements", "count", "rows", "run", "statements"]

_A: sa.Table = AgentRow.__table__  # type: ignore[assignment]
_R: sa.Table = RunRow.__table__  # type: ignore[assignment]
_W: sa.Table = WorldRow.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class QuietStatements:
    """The fast path's statements for one dialect (module docstring)."""

    agent: Any
    pool: Any
    changed: Any
    swap: Any
    swap_state: Any
    merge: Any
    merge_state: Any
    relock: Any
    insert: Any


@functools.cache
def statements(dialect: str) -> QuietStatements:
    """The statements for ``dialect`` (``conn.dialect.name``), built on the first call."""
    agent_id = sa.bindparam("agent_id", type_=sa.String())
    at_fence = sa.select(_R.c.id).where(_R.c.agent_id == agent_id,
                                        _R.c.fence == sa.bindparam("fence", type_=_R.c.fence.type)).exists()
    agent = sa.select(_A.c.frozen, _A.c.current_version, _A.c.applied_fence,
                      sa.cast(_A.c.state, sa.Text).label("state"), at_fence.label("opened"),
                      _A.c.pool_epoch, _A.c.pool_floor, sa.cast(_A.c.created_at, sa.Text).label("created_at")
                      ).where(_A.c.id == agent_id)
    cols: list[Any] = [WorldRow.id, WorldRow.io_id, WorldRow.interaction_id, WorldRow.seq, WorldRow.clock,
                       WorldRow.replayable, WorldRow.harness_version, WorldRow.model, WorldRow.provider,
                       sa.cast(WorldRow.signals, sa.Text).label("signals")]  # pool_memo.Head.at's order
    if {c.key for c in cols} != {c.key for c in WORLD_HEAD_COLUMNS}:
        raise RuntimeError("the quiet pool read must return every world head column")
    pool = (sa.select(*cols).where(WorldRow.agent_id == agent_id, WorldRow.tainted.is_(False))
            .order_by(WorldRow.clock.desc(), WorldRow.seq.desc(), WorldRow.id.desc())
            .limit(sa.bindparam("n", type_=sa.Integer())))
    changed = sa.select(*cols, WorldRow.tainted).where(
        WorldRow.agent_id == agent_id, WorldRow.stamp > sa.bindparam("since", type_=sa.BigInteger()))
    fence = sa.bindparam("new_fence", type_=_A.c.applied_fence.type)
    state = sa.bindparam("state", type_=JSONType)
    mine = _A.c.id == agent_id
    expected = sa.bindparam("expected", type_=_A.c.applied_fence.type)
    swap = sa.update(_A).where(mine, _A.c.applied_fence == expected)
    merge = sa.update(_A).where(mine)
    relock = sa.select(_A.c.applied_fence, _A.c.state).where(mine).with_for_update()
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_R)
    now = db_now()
    row = insert.values(
        id=sa.bindparam("run_id", type_=sa.String()), agent_id=agent_id,
        kind=sa.bindparam("kind", type_=sa.String()), io_id=sa.bindparam("io_id", type_=sa.String()),
        status=sa.bindparam("status", type_=sa.String()), reason=sa.bindparam("reason", type_=sa.Text()),
        start_version=sa.bindparam("start_version", type_=sa.String()), fence=fence,
        params=sa.bindparam("params", type_=JSONType), result=sa.bindparam("result", type_=JSONType),
        started_at=now, finished_at=now,
    ).on_conflict_do_nothing(index_elements=["agent_id", "fence"])
    return QuietStatements(
        agent=agent, pool=pool, changed=changed,
        swap=swap.values(applied_fence=fence, updated_at=now),
        swap_state=swap.values(applied_fence=fence, state=state, updated_at=now),
        merge=merge.values(applied_fence=fence, updated_at=now),
        merge_state=merge.values(applied_fence=fence, state=state, updated_at=now),
        relock=relock, insert=row,
    )


PLAIN = ("agent", "pool", "changed", "swap", "swap_state", "insert")
"""The statements of every quiet run, run as compiled driver SQL where the dialect allows."""

_plain_cache: weakref.WeakKeyDictionary[Dialect, dict[str, PlainStatement]] = weakref.WeakKeyDictionary()


def _plain_statements(dialect: Dialect) -> dict[str, PlainStatement]:
    """The :data:`PLAIN` statements compiled for this engine's dialect (its JSON serialiser included);
    a statement :func:`plain` cannot compile is left out (Core runs it)."""
    found = _plain_cache.get(dialect)
    if found is None:
        st = statements(dialect.name)
        compiled = {name: plain(getattr(st, name), dialect) for name in PLAIN}
        found = {k: v for k, v in compiled.items() if v is not None}
        _plain_cache[dialect] = found
    return found


def run(conn: Connection, name: str, params: Mapping[str, Any]) -> CursorResult[Any]:
    """Run the statement ``name`` of :class:`QuietStatements` with ``params``: as driver SQL where
    compiled (on SQLite its rows then hold a boolean as ``0``/``1``), else the Core construct."""
    fast = _plain_statements(conn.dialect).get(name)
    if fast is not None:
        return fast.execute(conn, params)
    return conn.execute(getattr(statements(conn.dialect.name), name), dict(params))


def rows(conn: Connection, name: str, params: Mapping[str, Any]) -> list[Any]:
    """The rows of the read ``name`` (``agent``, ``pool``, ``changed``) as plain tuples in the select's
    column order: the driver's own rows where compiled (no result object: on SQLite a boolean is
    ``0``/``1``), else the Core construct's."""
    fast = _plain_statements(conn.dialect).get(name)
    if fast is not None:
        return fast.run(conn, params)
    return list(conn.execute(getattr(statements(conn.dialect.name), name), dict(params)))


def count(conn: Connection, name: str, params: Mapping[str, Any]) -> int:
    """Run the write ``name`` (``swap``, ``swap_state``, ``insert``) with ``params``; the rows it
    changed. Driver SQL where compiled (``rsi_common.db.driver_count``: no execution context, no result
    object), else the Core construct."""
    fast = _plain_statements(conn.dialect).get(name)
    if fast is not None:
        return run_count(conn, fast.sql, fast.bind(params))
    return int(conn.execute(getattr(statements(conn.dialect.name), name), dict(params)).rowcount)
