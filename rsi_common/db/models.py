"""ORM models of the durable state (docs/protocol.md#sql-tables, docs/algorithm/consolidation.md §3.12,
docs/formats.md §7.5).

Seven tables here (the service's tokens and audit log are in :mod:`rsi_common.db.access`), all
prefixed ``rsi_`` so they can share a database with the host application:

* ``rsi_agents`` — one row per agent: current harness version (``NULL`` = H0), frozen flag,
  consolidation state (docs/algorithm/consolidation.md §3.2), ``applied_fence`` (the fence of the newest run
  whose final
  write was applied, docs/algorithm/consolidation.md §3.12.7) and ``turns`` (turns recorded, the retention
  clock).
* ``rsi_harnesses`` — one row per adopted version of an agent (provenance: parent, run, summary).
* ``rsi_worlds`` — one row per recorded turn (docs/formats.md §4.1); ``seq`` numbers the turns of one
  conversation (``interaction_id``) from 1; ``enqueued_at`` is ``NULL`` until the turn's
  consolidation trigger was handed off (see :class:`WorldRow`).
* ``rsi_runs`` — one row per consolidation (or skipped turn); ``(agent_id, fence)`` is unique.
* ``rsi_replays`` — one row per replay trial of a run; ``(run_id, candidate, world_id, trial)``
  is unique, which makes trial tasks idempotent (docs/protocol.md#redis-key-protocol).
* ``rsi_trajectories`` — one content-free metrics row per turn (docs/formats.md §7.5).
* ``rsi_regressions`` — the agent's regression set: one row per lesson an adoption learned (a copy of
  the world and the checks it fixed; docs/consolidation/regression.md).

Every timestamp is filled by the database clock (:func:`~rsi_common.db.sqltypes.db_now`) and
read back timezone-aware (UTC). JSON columns keep key order on both backends (PostgreSQL ``json``,
not ``jsonb``: see :mod:`rsi_common.db.sqltypes`).

Deliberate non-constraints: ``rsi_harnesses.run_id`` and ``rsi_replays.world_id`` are plain
strings, not foreign keys, because run and world retention must not erase provenance or fail.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rsi_common.db.sqltypes import BigIntId, JSONType, UTCDateTime, db_now

__all__ = [
    "RUN_STATUSES",
    "AgentRow",
    "Base",
    "HarnessRow",
    "RegressionRow",
    "ReplayRow",
    "ReplaySource",
    "ReplayStatus",
    "RunRow",
    "RunStatus",
    "TrajectoryRow",
    "WorldRow",
]

RunStatus = Literal["running", "skipped", "interrupted", "recorded", "kept", "failed", "adopted"]
"""Host-level run statuses (docs/algorithm/formulas.md §1.2): ``running`` until the final write, then one of
the others."""
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
ReplayStatus = Literal["ok", "missing", "cancelled"]
ReplaySource = Literal["recorded", "cached", "replay"]

_NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base; ``Base.metadata`` is the schema Alembic migrates to."""

    metadata = sa.MetaData(naming_convention=_NAMING)
    # Columns filled by the database clock are read back in the INSERT/UPDATE itself (RETURNING),
    # so rows stay complete after the session closes.
    __mapper_args__ = {"eager_defaults": True}  # noqa: RUF012 - read once by the mapper


def _created() -> Mapped[datetime]:
    return mapped_column(UTCDateTime(), nullable=False, default=db_now())


def _agent_fk() -> Mapped[str]:
    return mapped_column(sa.String(255), sa.ForeignKey("rsi_agents.id", ondelete="CASCADE"), nullable=False)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class AgentRow(Base):
    """One agent (docs/protocol.md#sql-tables, docs/algorithm/consolidation.md §3.2, §3.12.7)."""

    __tablename__ = "rsi_agents"

    id: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    current_version: Mapped[str | None] = mapped_column(sa.String(100), nullable=True)
    """Harness version used from the agent's next turn; ``None`` = H0."""
    frozen: Mapped[bool] = mapped_column(sa.Boolean(), nullable=False, default=False)
    """A frozen agent records worlds but never consolidates (docs/algorithm/consolidation.md §3.12.4)."""
    state: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False, default=dict)
    """Consolidation state (docs/algorithm/consolidation.md §3.2); ``{}`` until the first run saves one."""
    applied_fence: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False, default=0)
    """Fence of the newest run whose final write was applied; older fences are refused."""
    turns: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False, default=0,
                                       server_default=sa.text("0"))
    """Turns recorded by :meth:`~rsi_common.client.RsiClient.record_turn` (repeats included): the
    clock of the amortised retention (docs/performance/record-path.md)."""
    pool_epoch: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False,
                                            server_default=sa.text("0"))
    """The last ``stamp`` given to one of the agent's worlds; kept by database triggers (migration
    ``0010_epoch``, docs/performance/consolidation.md#the-no-signal-path), never written by the code."""
    pool_floor: Mapped[float | None] = mapped_column(sa.Double(), nullable=True)
    """The greatest ``clock`` one of the agent's worlds had when it was deleted or its ``clock`` or
    ``agent_id`` changed (``None``: never); kept by the same triggers."""
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), nullable=False, default=db_now(), onupdate=db_now()
    )


class HarnessRow(Base):
    """One adopted (or cloned) harness version of an agent, with provenance
    (docs/algorithm/consolidation.md §3.12.10)."""

    __tablename__ = "rsi_harnesses"
    __table_args__ = (sa.UniqueConstraint("agent_id", "version"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    """Insertion order; :func:`~rsi_common.db.agents.lineage` lists versions by it."""
    agent_id: Mapped[str] = _agent_fk()
    version: Mapped[str] = mapped_column(sa.String(100), nullable=False)
    parent_version: Mapped[str | None] = mapped_column(sa.String(100), nullable=True)
    """The run's start version (``None`` = H0)."""
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False)
    """Harness payload ``{manifest, files, version}`` (docs/formats.md §5.3)."""
    run_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """The adopting run's result summary (docs/algorithm/consolidation.md §3.1 ``summary()``)."""
    origin: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    """``consolidate``, ``refine``, ``operator`` or ``clone`` (docs/runtime/refine.md#audit);
    ``None`` on rows written before the runtime."""
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_reason: Mapped[str | None] = mapped_column(sa.String(500), nullable=True)
    created_at: Mapped[datetime] = _created()


class WorldRow(Base):
    """One recorded turn (docs/formats.md §4.1).

    ``enqueued_at`` (project decision) is ``NULL`` from the moment the world is saved until its
    consolidation trigger was handed off — a run was enqueued with a fresh lease, or the pending
    mark was set, or no trigger is due (frozen agent). A sweeper lists worlds still ``NULL`` after
    a grace period (:func:`~rsi_common.db.worlds.unenqueued_worlds`): they were saved while the
    broker or Redis was down, and their agent is triggered again.
    """

    __tablename__ = "rsi_worlds"
    __table_args__ = (
        sa.UniqueConstraint("agent_id", "io_id"),
        sa.UniqueConstraint("agent_id", "interaction_id", "seq"),
        # (agent_id, clock, seq) read backwards serves "clock DESC, seq DESC" on both backends.
        sa.Index("ix_rsi_worlds_latest", "agent_id", "clock", "seq"),
        sa.Index("ix_rsi_worlds_unenqueued", "enqueued_at", "created_at"),
        sa.Index("ix_rsi_worlds_stamp", "agent_id", "stamp"),
    )

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    """``"w_" + 24 lowercase hex``."""
    agent_id: Mapped[str] = _agent_fk()
    io_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    """The host's turn id; unique per agent (a repeated save of the same turn returns the row)."""
    interaction_id: Mapped[str] = mapped_column(sa.String(255), nullable=False, default="")
    seq: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    """1 + the highest ``seq`` of the agent's stored worlds in the same conversation."""
    harness_version: Mapped[str | None] = mapped_column(sa.String(100), nullable=True)
    model: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    provider: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    world: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False)
    """The ``rsi-world/1`` record."""
    signals: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False, default=dict)
    """User signals (docs/algorithm/consolidation.md §3.4): explicit ones from the host, ``implicit`` from
    consolidation."""
    replayable: Mapped[bool] = mapped_column(sa.Boolean(), nullable=False)
    clock: Mapped[float] = mapped_column(sa.Double(), nullable=False)
    """Turn start, epoch seconds: the recency key."""
    bytes: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    """Serialized size of the world record (docs/formats.md §4.1)."""
    created_at: Mapped[datetime] = _created()
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    tainted: Mapped[bool] = mapped_column(sa.Boolean(), nullable=False, default=False,
                                          server_default=sa.false())
    """A tainted world never enters evaluation, the proposer's views, the critic's patterns or the
    pairing (docs/runtime/refine.md#taint)."""
    taint_reason: Mapped[str | None] = mapped_column(sa.String(300), nullable=True)
    stamp: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False, server_default=sa.text("0"))
    """The agent's ``pool_epoch`` when the row was inserted or a column the pool read returns last
    changed; set by database triggers (migration ``0010_epoch``), never by the code."""


class RunRow(Base):
    """One consolidation run (docs/algorithm/consolidation.md §3.3) or a skipped turn
    (docs/algorithm/consolidation.md §3.12.4)."""

    __tablename__ = "rsi_runs"
    __table_args__ = (
        sa.UniqueConstraint("agent_id", "fence"),
        sa.Index("ix_rsi_runs_agent_id_status", "agent_id", "status"),
        sa.Index("ix_rsi_runs_agent_id_started_at", "agent_id", "started_at"),
        sa.CheckConstraint(_in("status", RUN_STATUSES), name="status"),
    )

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    agent_id: Mapped[str] = _agent_fk()
    kind: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    """``consolidate`` (later phases add others)."""
    io_id: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="running")
    """A :data:`RunStatus`."""
    reason: Mapped[str | None] = mapped_column(sa.Text(), nullable=True)
    """One sentence (docs/algorithm/consolidation.md §3.3), e.g. ``superseded`` for an interrupted run
    (project decision)."""
    start_version: Mapped[str | None] = mapped_column(sa.String(100), nullable=True)
    adopted_version: Mapped[str | None] = mapped_column(sa.String(100), nullable=True)
    fence: Mapped[int | None] = mapped_column(sa.BigInteger(), nullable=True)
    """The lease's fence; ``None`` only for runs that never held a lease (skipped turns)."""
    params: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """Round parameters of docs/algorithm/consolidation.md §3.3 step 10 for the later tasks of the run."""
    drafts: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """Variant label → draft (docs/algorithm/consolidation.md §3.3 step 12, project decision)."""
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """``ConsolidationResult.summary()`` (no payload, no state)."""
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """``{type, message}`` of the exception that failed the run (``stored.error_record``)."""
    started_at: Mapped[datetime] = _created()
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ReplayRow(Base):
    """One replay trial of a run (docs/algorithm/consolidation.md §3.6.2); the 4-column unique key is the
    idempotency key."""

    __tablename__ = "rsi_replays"
    __table_args__ = (
        sa.UniqueConstraint("run_id", "candidate", "world_id", "trial"),
        sa.CheckConstraint(_in("status", get_args(ReplayStatus)), name="status"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("rsi_runs.id", ondelete="CASCADE"), nullable=False
    )
    candidate: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    """``incumbent`` or a variant label."""
    world_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    trial: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    source: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="replay")
    """A :data:`ReplaySource`."""
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    """A :data:`ReplayStatus`."""
    reward: Mapped[float] = mapped_column(sa.Double(), nullable=False, default=0.0)
    weight: Mapped[float] = mapped_column(sa.Double(), nullable=False, default=0.0)
    tokens: Mapped[int | None] = mapped_column(sa.Integer(), nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    created_at: Mapped[datetime] = _created()


class TrajectoryRow(Base):
    """Content-free metrics of one turn (docs/formats.md §7.5)."""

    __tablename__ = "rsi_trajectories"
    __table_args__ = (sa.Index("ix_rsi_trajectories_agent_id_created_at", "agent_id", "created_at"),)

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    """The record's ``trajectory_id``."""
    agent_id: Mapped[str] = _agent_fk()
    io_id: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    interaction_id: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    harness_version: Mapped[str | None] = mapped_column(sa.String(100), nullable=True)
    harness_name: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    lineage: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    """``fixed``, ``agent`` or ``h0``."""
    provider: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    model: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    thinking_level: Mapped[str | None] = mapped_column(sa.String(32), nullable=True)
    status: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    termination_reason: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    error: Mapped[str | None] = mapped_column(sa.String(300), nullable=True)
    """Error class and code only, ≤ 300 characters."""
    steps: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False, default=dict)
    policy_tokens: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    usage_by_purpose: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False, default=dict)
    components_fired: Mapped[list[str]] = mapped_column(JSONType, nullable=False, default=list)
    params_read: Mapped[list[str]] = mapped_column(JSONType, nullable=False, default=list)
    final_text_chars: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    world_bytes: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    created_at: Mapped[datetime] = _created()


class RegressionRow(Base):
    """One lesson of an agent's regression set (docs/consolidation/regression.md).

    When a run adopts, every evaluation world whose criteria the winner fixed becomes a row: a copy
    of the world (so world retention cannot remove it) with the checks it was fixed on. Later rounds
    replay the rows whose ``version`` is the current version or one of its ancestors, for the
    incumbent and every candidate; a candidate that fails one the incumbent passes is rejected.
    """

    __tablename__ = "rsi_regressions"
    __table_args__ = (sa.UniqueConstraint("agent_id", "version", "world_id"),)

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    agent_id: Mapped[str] = _agent_fk()
    version: Mapped[str] = mapped_column(sa.String(100), nullable=False)
    """The adopted version that learned the lesson."""
    run_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    """The run that learned it."""
    world_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    """The world it was learned on (its id inside evaluations)."""
    lesson: Mapped[str] = mapped_column(sa.String(300), nullable=False)
    """What was learned, in the analyst's general terms (or the criteria names)."""
    world: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False)
    """The world record (``rsi-world/1``)."""
    signals: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False, default=dict)
    interaction_id: Mapped[str] = mapped_column(sa.String(255), nullable=False, default="")
    seq: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    checks: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, nullable=False)
    """The checks the winner fixed on it (the lesson's criteria)."""
    created_at: Mapped[datetime] = _created()
    last_used_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())
    """Set when a round replays it; the least recently used leave first beyond the bound."""
