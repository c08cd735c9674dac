"""The regression set: lessons an agent learned, kept so later adoptions cannot undo them
(docs/consolidation/regression.md).

The *active* set of a harness version is the lessons learned by that version and by its ancestors
(its ``parent_version`` chain in ``rsi_harnesses``): a rollback therefore drops, without deleting
anything, exactly the lessons of the versions it leaves, and a roll-forward brings them back.
Repository functions never commit.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from rsi_common.db.engine import EncodedJSON
from rsi_common.db.models import HarnessRow, RegressionRow
from rsi_common.db.sqltypes import db_now

__all__ = [
    "LESSON_CHARS",
    "active_regressions",
    "add_regressions",
    "ancestry",
    "regression_world",
    "regressions",
    "touch_regressions",
]

LESSON_CHARS = 300
"""Width of ``rsi_regressions.lesson``."""


def ancestry(session: Session, agent_id: str, version: str | None) -> list[str]:
    """``version`` and its stored ancestors, newest first (``[]`` for H0). A cycle stops the walk."""
    parents = dict(
        session.execute(
            sa.select(HarnessRow.version, HarnessRow.parent_version).where(HarnessRow.agent_id == agent_id)
        )

        .all()
    )
    out: list[str] = []
    while version is not None and version not in out:
        out.append(version)
        version = parents.get(version)
    return out


def active_regressions(session: Session, agent_id: str, version: str | None) -> list[RegressionRow]:
    """The lessons of ``version`` and its ancestors, oldest first."""
    versions = ancestry(session, agent_id, version)
    if not versions:
        return []
    stmt = (
        sa.select(RegressionRow)
        .where(RegressionRow.agent_id == agent_id, RegressionRow.version.in_(versions))
        .order_by(RegressionRow.created_at, RegressionRow.id)
    )
    return list(session.execute(stmt).scalars())


def regressions(session: Session, agent_id: str) -> list[RegressionRow]:
    """Every stored lesson of the agent, oldest first."""
    stmt = (
        sa.select(RegressionRow)
        .where(RegressionRow.agent_id == agent_id)
        .order_by(RegressionRow.created_at, RegressionRow.id)
    )
    return list(session.execute(stmt).scalars())


def regression_world(session: Session, agent_id: str, world_id: str) -> RegressionRow | None:
    """The newest lesson learned on ``world_id`` (its stored copy of the world), or None."""
    stmt = (
        sa.select(RegressionRow)
        .where(RegressionRow.agent_id == agent_id, RegressionRow.world_id == world_id)
        .order_by(RegressionRow.created_at.desc(), RegressionRow.id.desc())
        .limit(1)
    )
    return session.execute(stmt).scalars().first()


def touch_regressions(session: Session, ids: Sequence[str]) -> None:
    """Mark lessons as used now (the eviction order)."""
    if ids:
        session.execute(
            sa.update(RegressionRow).where(RegressionRow.id.in_(list(ids))).values(last_used_at=db_now())
        )


def add_regressions(
    session: Session,
    agent_id: str,
    version: str,
    run_id: str,
    entries: Sequence[Mapping[str, Any]],
    bound: int,
) -> int:
    """Store the lessons ``version`` learned in ``run_id``; then keep the agent's ``bound`` most
    recently used lessons (the least recently used leave first). A lesson already stored for the
    same ``(version, world_id)`` is left as it is.

    Args:
        entries: ``{world_id, lesson, world, signals, interaction_id, seq, checks}`` each; ``world``
            may be encoded already (``engine.encode_json``: before the write turn).
        bound: lessons kept per agent (0 keeps none).

    Returns:
        The number of lessons removed by the bound.
    """
    rows = []
    seen: set[str] = set()
    for e in entries:  # the first entry of a world; one stored before is kept by ON CONFLICT below
        if e["world_id"] in seen:
            continue
        seen.add(e["world_id"])
        rows.append({
            "id": "rg_" + secrets.token_hex(12), "agent_id": agent_id, "version": version, "run_id": run_id,
            "world_id": e["world_id"], "lesson": str(e["lesson"])[:LESSON_CHARS],
            "world": e["world"] if isinstance(e["world"], EncodedJSON) else dict(e["world"]),
            "signals": dict(e.get("signals") or {}), "interaction_id": str(e.get("interaction_id") or ""),
            "seq": int(e.get("seq") or 0), "checks": [dict(c) for c in e["checks"]],
        })
    table: Any = RegressionRow.__table__
    if rows:  # one cached Core statement, executemany (no ORM unit of work, no read of the stored
        # lessons first: the unique (agent, version, world) key keeps a stored one); the clock
        # columns by their defaults, db_now()
        insert: Any = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
        session.execute(insert(table).on_conflict_do_nothing(
            index_elements=["agent_id", "version", "world_id"]), rows)
    kept = (sa.select(table.c.id).where(table.c.agent_id == agent_id)
            .order_by(table.c.last_used_at.desc(), table.c.created_at.desc(), table.c.id.desc())
            .limit(max(0, bound)))
    result: Any = session.execute(sa.delete(table).where(  # the bound in one statement
        table.c.agent_id == agent_id, table.c.id.not_in(kept.scalar_subquery())))
    return int(result.rowcount or 0)
