"""Agents and their harness versions: creation, locking, rollback, pin, freeze, clone, lineage.

Every function runs inside the caller's transaction (see :mod:`rsi_common.db.engine`) and never
commits. Version moves (:func:`rollback_to`, :func:`pin`, :func:`clone_agent`) only move
``current_version`` among the agent's stored versions or to H0 (``None``) — nothing is adopted
here (docs/algorithm/consolidation.md §3.12.10). Publishing the change on ``rsi:harness`` is the caller's job
(:meth:`rsi_common.coord.Coordinator.publish_harness_change`); a run that was going meanwhile
will not adopt (docs/algorithm/consolidation.md §3.12.7 b).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from rsi_common.boundary import MAX_HARNESS_VERSION_CHARS, check_id, check_label
from rsi_common.credentials import safe_repr
from rsi_common.db.models import AgentRow, HarnessRow
from rsi_common.errors import InvalidInput, UnknownAgentError, UnknownVersionError

__all__ = [
    "add_harness",
    "clone_agent",
    "ensure_agent",
    "freeze",
    "get_agent",
    "get_harness",
    "lineage",
    "lock_agent",
    "pin",
    "rollback_to",
    "unfreeze",
]


def _check_id(agent_id: str) -> None:
    """The id grammar of the input boundary, checked before the database sees the id, so SQLite and
    PostgreSQL refuse the same ids (docs/security/input-boundary.md)."""
    check_id(agent_id, "agent_id")


def ensure_agent(session: Session, agent_id: str) -> AgentRow:
    """Create the agent if absent (H0, not frozen, empty state) and return its row.

    Safe under concurrency: the insert is ``ON CONFLICT DO NOTHING`` on both backends.

    Raises:
        InputLimitError: the id breaks the id grammar.
    """
    _check_id(agent_id)
    values: dict[str, Any] = {"id": agent_id, "frozen": False, "state": {}, "applied_fence": 0}
    if session.get_bind().dialect.name == "postgresql":
        stmt: Any = postgresql.insert(AgentRow).values(**values).on_conflict_do_nothing(index_elements=["id"])
    else:
        stmt = sqlite.insert(AgentRow).values(**values).on_conflict_do_nothing(index_elements=["id"])
    session.execute(stmt)
    return get_agent(session, agent_id)


def get_agent(session: Session, agent_id: str) -> AgentRow:
    """The agent's row, freshly read.

    Raises:
        InputLimitError: the id breaks the id grammar.
        UnknownAgentError: no such agent.
    """
    _check_id(agent_id)
    row = session.execute(
        sa.select(AgentRow).where(AgentRow.id == agent_id).execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if row is None:
        raise UnknownAgentError(f"unknown agent {safe_repr(agent_id)}")
    return row


def lock_agent(session: Session, agent_id: str) -> AgentRow:
    """Lock the agent's row for the rest of the transaction and return it, freshly read.

    PostgreSQL: ``SELECT … FOR UPDATE``; SQLite: the transaction already holds the write lock
    (``BEGIN IMMEDIATE``, :mod:`rsi_common.db.engine`). Every read-then-write of one agent's rows
    goes through this lock, which is what makes ``seq`` numbering, retention and the fenced final
    write safe under concurrency.

    Raises:
        InputLimitError: the id breaks the id grammar.
        UnknownAgentError: no such agent.
    """
    _check_id(agent_id)
    row = session.execute(
        sa.select(AgentRow)
        .where(AgentRow.id == agent_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if row is None:
        raise UnknownAgentError(f"unknown agent {safe_repr(agent_id)}")
    return row


def get_harness(session: Session, agent_id: str, version: str) -> HarnessRow:
    """The stored harness row of ``version`` for the agent.

    Raises:
        InputLimitError: the version is not a short single-line text (``String(100)``).
        UnknownVersionError: the agent has no such stored version.
    """
    check_label(version, "version", max_chars=MAX_HARNESS_VERSION_CHARS)
    row = session.execute(
        sa.select(HarnessRow).where(HarnessRow.agent_id == agent_id, HarnessRow.version == version)
    ).scalar_one_or_none()
    if row is None:
        raise UnknownVersionError(
            f"agent {safe_repr(agent_id)} has no stored harness version {safe_repr(version)}"
        )
    return row


def lock_agent_version(session: Session, agent_id: str) -> str | None:
    """:func:`lock_agent` reading the ``current_version`` column only (no state decoded, no ORM row).

    Raises:
        InputLimitError: the id breaks the id grammar.
        UnknownAgentError: no such agent.
    """
    _check_id(agent_id)
    found = session.execute(
        sa.select(AgentRow.current_version).where(AgentRow.id == agent_id).with_for_update()).one_or_none()
    if found is None:
        raise UnknownAgentError(f"unknown agent {safe_repr(agent_id)}")
    return found[0]


def add_harness(
    session: Session,
    agent_id: str,
    version: str,
    payload: Mapping[str, Any],
    *,
    parent_version: str | None = None,
    run_id: str | None = None,
    summary: Mapping[str, Any] | None = None,
) -> HarnessRow:
    """Store a harness version for the agent unless already stored (versions are content-addressed).

    A version that is already stored keeps its first row (its original provenance); nothing is
    written. ``current_version`` is not moved. The caller holds the agent lock.

    Returns:
        The stored row (new or existing).
    """
    existing = session.execute(
        sa.select(HarnessRow).where(HarnessRow.agent_id == agent_id, HarnessRow.version == version)
    ).scalar_one_or_none()
    if existing is not None:
        return existing
    row = HarnessRow(
        agent_id=agent_id,
        version=version,
        parent_version=parent_version,
        payload=dict(payload),
        run_id=run_id,
        summary=dict(summary) if summary is not None else None,
    )
    session.add(row)
    session.flush()
    return row


def lineage(session: Session, agent_id: str) -> list[HarnessRow]:
    """Every stored version of the agent, oldest first (insertion order).

    Raises:
        UnknownAgentError: no such agent.
    """
    get_agent(session, agent_id)
    return list(
        session.execute(
            sa.select(HarnessRow).where(HarnessRow.agent_id == agent_id).order_by(HarnessRow.id)
        ).scalars()
    )


def _move(session: Session, agent_id: str, version: str | None, *, frozen: bool | None) -> AgentRow:
    agent = lock_agent(session, agent_id)
    if version is not None:
        get_harness(session, agent_id, version)
    agent.current_version = version
    if frozen is not None:
        agent.frozen = frozen
    session.flush()
    return get_agent(session, agent_id)


def _set_frozen(session: Session, agent_id: str, frozen: bool) -> AgentRow:
    agent = lock_agent(session, agent_id)
    agent.frozen = frozen
    session.flush()
    return get_agent(session, agent_id)


def rollback_to(session: Session, agent_id: str, version: str | None) -> AgentRow:
    """Make ``version`` (a stored version, or ``None`` = H0) current from the agent's next turn.

    The frozen flag is unchanged. A run going meanwhile will not adopt
    (docs/algorithm/consolidation.md §3.12.7 b).

    Raises:
        UnknownAgentError: no such agent.
        UnknownVersionError: ``version`` is not stored for this agent.
    """
    return _move(session, agent_id, version, frozen=None)


def pin(session: Session, agent_id: str, version: str | None) -> AgentRow:
    """Like :func:`rollback_to`, and freeze the agent (no further consolidation)."""
    return _move(session, agent_id, version, frozen=True)


def freeze(session: Session, agent_id: str) -> AgentRow:
    """Stop consolidating the agent (its turns are still recorded,
    docs/algorithm/consolidation.md §3.12.4)."""
    return _set_frozen(session, agent_id, True)


def unfreeze(session: Session, agent_id: str) -> AgentRow:
    """Resume consolidating the agent."""
    return _set_frozen(session, agent_id, False)


def clone_agent(session: Session, source_id: str, target_id: str) -> AgentRow:
    """Give ``target_id`` the lineage and current version of ``source_id``.

    The target is created if absent. Every stored version of the source that the target lacks is
    copied (same version id, payload, parent, run id and summary, in the source's order), then the
    target's ``current_version`` is set to the source's; the source's lessons (regression set) are
    copied too. Worlds, runs, state and the frozen flag are not copied. Idempotent.

    Raises:
        UnknownAgentError: the source does not exist.
        InvalidInput: source and target are the same agent.
    """
    if source_id == target_id:
        raise InvalidInput("cannot clone an agent onto itself")
    source = get_agent(session, source_id)
    ensure_agent(session, target_id)
    target = lock_agent(session, target_id)
    for row in lineage(session, source_id):
        add_harness(
            session,
            target_id,
            row.version,
            row.payload,
            parent_version=row.parent_version,
            run_id=row.run_id,
            summary=row.summary,
        )
    target.current_version = source.current_version
    _clone_regressions(session, source_id, target_id)
    session.flush()
    return get_agent(session, target_id)


def _clone_regressions(session: Session, source_id: str, target_id: str) -> None:
    """Copy the source's lessons the target lacks (same version and world; new ids)."""
    import secrets

    from rsi_common.db.models import RegressionRow

    have = set(session.execute(sa.select(RegressionRow.version, RegressionRow.world_id)
                               .where(RegressionRow.agent_id == target_id)).all())
    rows = session.execute(sa.select(RegressionRow).where(RegressionRow.agent_id == source_id)
                           .order_by(RegressionRow.created_at, RegressionRow.id)).scalars()
    for r in rows:
        if (r.version, r.world_id) in have:
            continue
        session.add(RegressionRow(
            id="rg_" + secrets.token_hex(12), agent_id=target_id, version=r.version, run_id=r.run_id,
            world_id=r.world_id, lesson=r.lesson, world=dict(r.world), signals=dict(r.signals or {}),
            interaction_id=r.interaction_id, seq=r.seq, checks=list(r.checks)))
