"""ORM models of the agent runtime (docs/runtime/README.md#tables).

Nine tables, all created by migration ``0008_runtime``:

* ``rsi_agent_runtime`` — a registered agent: its tree (``root_id``, ``parent_id``, ``depth``),
  the spec it was spawned from, its profile, lifecycle state and the root's cap overrides.
* ``rsi_sessions`` — agent × session: logical turns committed, the slice of the waiting turn, its
  pending tool calls and wait deadline; ``version`` is the optimistic-commit counter.
* ``rsi_subagents`` — one row per spawn (a handle, ``sa_`` + 24 hex); unique on
  ``(parent_agent, parent_io, tool_use_id)`` (a retried spawn returns it) and
  ``(parent_agent, name)``.
* ``rsi_messages`` — the durable mailboxes (``m_`` + 24 hex, ``seq`` orders delivery); unique
  ``key`` (a retried send returns the first receipt).
* ``rsi_goals``, ``rsi_schedules``, ``rsi_autonomy`` — goals, heartbeats and autonomous loops.
* ``rsi_spend`` — one charge per unique ``key``, always charged to the tree's root.
* ``rsi_events`` — the audit log of lifecycle transitions, cap hits, taints and revocations.

Agent ids in ``rsi_events`` and ``rsi_spend`` are plain strings, not foreign keys: a deleted agent's
tombstone, events and charges stay (the caps of the day must still count them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from rsi_common.db.models import Base
from rsi_common.db.sqltypes import BigIntId, JSONType, UTCDateTime, db_now

__all__ = [
    "AUTONOMY_STATUSES",
    "GOAL_STATUSES",
    "HANDLE_STATUSES",
    "LIFECYCLES",
    "SCHEDULE_STATUSES",
    "AgentRuntimeRow",
    "AutonomyRow",
    "EventRow",
    "GoalRow",
    "HandleStatus",
    "Lifecycle",
    "MessageRow",
    "ScheduleRow",
    "SessionRow",
    "SpendRow",
    "SubagentRow",
]

Lifecycle = Literal["admitted", "running", "idle", "inactive", "failed", "deleted"]
LIFECYCLES: tuple[str, ...] = get_args(Lifecycle)
HandleStatus = Literal["queued", "running", "awaiting", "completed", "failed", "cancelled"]
HANDLE_STATUSES: tuple[str, ...] = get_args(HandleStatus)
GOAL_STATUSES: tuple[str, ...] = ("active", "paused", "completed", "budget_exhausted", "cancelled")
SCHEDULE_STATUSES: tuple[str, ...] = ("active", "paused", "deleted")
AUTONOMY_STATUSES: tuple[str, ...] = ("running", "completed", "stopped")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _created() -> Mapped[datetime]:
    return mapped_column(UTCDateTime(), nullable=False, default=db_now())


def _agent_fk() -> Mapped[str]:
    return mapped_column(sa.String(255), sa.ForeignKey("rsi_agents.id", ondelete="CASCADE"), nullable=False)


class AgentRuntimeRow(Base):
    """A registered agent (docs/runtime/README.md#terms)."""

    __tablename__ = "rsi_agent_runtime"
    __table_args__ = (
        sa.Index("ix_rsi_agent_runtime_root_id", "root_id"),
        sa.Index("ix_rsi_agent_runtime_parent_id", "parent_id"),
        sa.CheckConstraint(_in("lifecycle", LIFECYCLES), name="lifecycle"),
    )

    agent_id: Mapped[str] = mapped_column(
        sa.String(255), sa.ForeignKey("rsi_agents.id", ondelete="CASCADE"), primary_key=True)
    root_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    """The tree's root (itself for a root); every charge of the agent goes to it."""
    parent_id: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    depth: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    spec: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    """The catalog spec a child was spawned from (``None`` for a root)."""
    profile: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False)
    """``AgentProfile`` as JSON: runs_on, provider, model, system_parts, toolset, tools, kwargs,
    messages, refine."""
    lifecycle: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="admitted")
    caps: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """A root's overrides of the daily caps (``{"tree_tokens_per_day": …}``); ignored below a root."""
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now(),
                                                 onupdate=db_now())


class SessionRow(Base):
    """Agent × session (docs/runtime/README.md#turns)."""

    __tablename__ = "rsi_sessions"
    __table_args__ = (sa.UniqueConstraint("agent_id", "session"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = _agent_fk()
    session: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    """``main`` for a root, the handle for a spawned child."""
    messages: Mapped[list[Any]] = mapped_column(JSONType, nullable=False, default=list)
    """The session's conversation so far (the messages a next turn continues)."""
    turns: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    """Logical turns started; io ``{session}:{turns}`` names the current one."""
    slice: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    """Slice of the current logical turn (0 = none waiting)."""
    version: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    """Optimistic-commit counter: a commit updates ``WHERE version = :seen``."""
    pending: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """A yielded turn's ``TurnResult.pending`` (tool-use ids in order, results so far, waits)."""
    wait_deadline: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now(),
                                                 onupdate=db_now())


class SubagentRow(Base):
    """One spawn, named by its handle (docs/runtime/README.md#sub-agents)."""

    __tablename__ = "rsi_subagents"
    __table_args__ = (
        sa.UniqueConstraint("parent_agent", "parent_io", "tool_use_id"),
        sa.UniqueConstraint("parent_agent", "name"),
        sa.Index("ix_rsi_subagents_parent_agent_parent_session_status", "parent_agent",
                 "parent_session", "status"),
        sa.Index("ix_rsi_subagents_child_agent", "child_agent"),
        sa.Index("ix_rsi_subagents_status", "status"),
        sa.CheckConstraint(_in("status", HANDLE_STATUSES), name="status"),
    )

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    """``sa_`` + 24 lowercase hex: the handle."""
    parent_agent: Mapped[str] = mapped_column(
        sa.String(255), sa.ForeignKey("rsi_agents.id", ondelete="CASCADE"), nullable=False)
    parent_session: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    parent_io: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    """The io of the logical turn that spawned (slice suffix removed)."""
    tool_use_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    child_agent: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    """``<parent>/<spec>``."""
    name: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    spec: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    spec_version: Mapped[str | None] = mapped_column(sa.String(100), nullable=True)
    """The parent's harness version whose ``subagents/<spec>.md`` the child runs (``None`` = H0)."""
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="queued")
    answer: Mapped[str | None] = mapped_column(sa.Text(), nullable=True)
    """Clipped final text of the child's first logical turn."""
    error: Mapped[str | None] = mapped_column(sa.String(300), nullable=True)
    """An error code (``worker_lost``, ``cancelled:<reason>``, …), never model text."""
    attempt: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    created_at: Mapped[datetime] = _created()
    settled_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class MessageRow(Base):
    """One message in a durable mailbox (docs/runtime/README.md#messages)."""

    __tablename__ = "rsi_messages"
    __table_args__ = (
        sa.Index("ix_rsi_messages_mailbox", "recipient", "session_id", "consumed_io", "seq"),
    )

    seq: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    """Delivery order."""
    id: Mapped[str] = mapped_column(sa.String(64), nullable=False, unique=True)
    """``m_`` + 24 lowercase hex."""
    key: Mapped[str] = mapped_column(sa.String(600), nullable=False, unique=True)
    """Idempotency key (``msg:{sender}:{io}:{tool_use_id}:{target}``, ``hb:{id}:{old}``,
    ``spawn:{handle}``, ``op:{uuid}``)."""
    kind: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    """``message``, ``spawn_input``, ``heartbeat`` or ``continuation``."""
    sender: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    relationship: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    """The sender as the recipient sees it: ``parent``, ``child``, ``sibling``, ``operator``."""
    recipient: Mapped[str] = _agent_fk()
    session_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    text: Mapped[str] = mapped_column(sa.Text(), nullable=False)
    label: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    hops: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    root_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    claimed_io: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    consumed_io: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    created_at: Mapped[datetime] = _created()


class GoalRow(Base):
    """An agent's goal (docs/runtime/README.md#goals)."""

    __tablename__ = "rsi_goals"
    __table_args__ = (
        sa.Index("ix_rsi_goals_agent_id_status", "agent_id", "status"),
        sa.CheckConstraint(_in("status", GOAL_STATUSES), name="status"),
    )

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    agent_id: Mapped[str] = _agent_fk()
    objective: Mapped[str] = mapped_column(sa.Text(), nullable=False)
    token_budget: Mapped[int | None] = mapped_column(sa.BigInteger(), nullable=True)
    tokens_used: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False, default=0)
    check: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="active")
    reason: Mapped[str | None] = mapped_column(sa.Text(), nullable=True)
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now(),
                                                 onupdate=db_now())


class ScheduleRow(Base):
    """A heartbeat (docs/runtime/README.md#heartbeats)."""

    __tablename__ = "rsi_schedules"
    __table_args__ = (
        sa.Index("ix_rsi_schedules_status_next_at", "status", "next_at"),
        sa.CheckConstraint(_in("status", SCHEDULE_STATUSES), name="status"),
    )

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    agent_id: Mapped[str] = _agent_fk()
    label: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    instruction: Mapped[str] = mapped_column(sa.Text(), nullable=False)
    every_s: Mapped[int | None] = mapped_column(sa.Integer(), nullable=True)
    cron: Mapped[str | None] = mapped_column(sa.String(100), nullable=True)
    session: Mapped[str] = mapped_column(sa.String(255), nullable=False, default="main")
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="active")
    next_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    created_at: Mapped[datetime] = _created()


class AutonomyRow(Base):
    """An autonomous loop (docs/runtime/README.md#autonomy)."""

    __tablename__ = "rsi_autonomy"
    __table_args__ = (
        sa.Index("ix_rsi_autonomy_agent_id_status", "agent_id", "status"),
        sa.CheckConstraint(_in("status", AUTONOMY_STATUSES), name="status"),
    )

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    agent_id: Mapped[str] = _agent_fk()
    session: Mapped[str] = mapped_column(sa.String(255), nullable=False, default="main")
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="running")
    reason: Mapped[str | None] = mapped_column(sa.String(100), nullable=True)
    budget: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False)
    """``{max_turns, max_tokens, max_usd, max_wall_s}``."""
    check: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    turns: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    tokens: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False, default=0)
    usd: Mapped[float] = mapped_column(sa.Double(), nullable=False, default=0.0)
    stall: Mapped[list[Any]] = mapped_column(JSONType, nullable=False, default=list)
    """Final-text hashes of the latest tool-less turns (the stall rule)."""
    started_at: Mapped[datetime] = _created()
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class SpendRow(Base):
    """One charge, to the tree's root (docs/runtime/accounting.md#ledger)."""

    __tablename__ = "rsi_spend"
    __table_args__ = (
        sa.Index("ix_rsi_spend_root_id_day", "root_id", "day"),
        sa.Index("ix_rsi_spend_agent_id_day", "agent_id", "day"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(sa.String(600), nullable=False, unique=True)
    """``turn:{agent}:{io}``, ``spawn:{h}``, ``msg:{id}``, ``run:{run}`` or
    ``lost:{agent}:{io}:{attempt}``: a second charge with the same key is a no-op."""
    kind: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    root_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    agent_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    day: Mapped[str] = mapped_column(sa.String(10), nullable=False)
    """UTC day of the database clock, ``YYYY-MM-DD``."""
    tokens: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False, default=0)
    usd: Mapped[float] = mapped_column(sa.Double(), nullable=False, default=0.0)
    model_calls: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    tool_calls: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    turns: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    spawns: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    messages: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    created_at: Mapped[datetime] = _created()


class EventRow(Base):
    """One audit event (docs/runtime/README.md#lifecycle)."""

    __tablename__ = "rsi_events"
    __table_args__ = (sa.Index("ix_rsi_events_agent_id_id", "agent_id", "id"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    kind: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    """``lifecycle``, ``cap``, ``spawn``, ``settle``, ``cancel``, ``taint``, ``revoke``, …"""
    actor: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    """``runtime``, ``operator:<name>``, ``host``, or the agent id."""
    detail: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False, default=dict)
    created_at: Mapped[datetime] = _created()
