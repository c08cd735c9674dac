"""Initial schema: agents, harness versions, worlds, runs, replay trials, trajectories.

Revision ID: 0001
Revises:
Types are spelled out here (not imported from the models) so this revision never changes when
the models evolve: JSON is ``json`` (key order preserved; not ``jsonb``, see
``rsi_common.db.sqltypes``), timestamps are ``TIMESTAMP WITH TIME ZONE``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from rsi_common.db.migrations.coltypes import big_id, json_type, ts_type

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _agent_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["agent_id"], ["rsi_agents.id"], name=f"fk_{table}_agent_id_rsi_agents", ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "rsi_agents",
        sa.Column("id", sa.String(255), nullable=False),
        sa.Column("current_version", sa.String(100), nullable=True),
        sa.Column("frozen", sa.Boolean(), nullable=False),
        sa.Column("state", json_type(), nullable=False),
        sa.Column("applied_fence", sa.BigInteger(), nullable=False),
        sa.Column("created_at", ts_type(), nullable=False),
        sa.Column("updated_at", ts_type(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_agents"),
    )
    op.create_table(
        "rsi_harnesses",
        sa.Column("id", big_id(), autoincrement=True, nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("version", sa.String(100), nullable=False),
        sa.Column("parent_version", sa.String(100), nullable=True),
        sa.Column("payload", json_type(), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("summary", json_type(), nullable=True),
        sa.Column("created_at", ts_type(), nullable=False),
        _agent_fk("rsi_harnesses"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_harnesses"),
        sa.UniqueConstraint("agent_id", "version", name="uq_rsi_harnesses_agent_id_version"),
    )
    op.create_table(
        "rsi_worlds",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("io_id", sa.String(255), nullable=False),
        sa.Column("interaction_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("harness_version", sa.String(100), nullable=True),
        sa.Column("model", sa.String(255), nullable=True),
        sa.Column("provider", sa.String(64), nullable=True),
        sa.Column("world", json_type(), nullable=False),
        sa.Column("signals", json_type(), nullable=False),
        sa.Column("replayable", sa.Boolean(), nullable=False),
        sa.Column("clock", sa.Double(), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", ts_type(), nullable=False),
        sa.Column("enqueued_at", ts_type(), nullable=True),
        _agent_fk("rsi_worlds"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_worlds"),
        sa.UniqueConstraint("agent_id", "interaction_id", "seq",
                            name="uq_rsi_worlds_agent_id_interaction_id_seq"),
        sa.UniqueConstraint("agent_id", "io_id", name="uq_rsi_worlds_agent_id_io_id"),
    )
    op.create_index("ix_rsi_worlds_latest", "rsi_worlds", ["agent_id", "clock", "seq"])
    op.create_index("ix_rsi_worlds_unenqueued", "rsi_worlds", ["enqueued_at", "created_at"])
    op.create_table(
        "rsi_runs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("io_id", sa.String(255), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("start_version", sa.String(100), nullable=True),
        sa.Column("adopted_version", sa.String(100), nullable=True),
        sa.Column("fence", sa.BigInteger(), nullable=True),
        sa.Column("params", json_type(), nullable=True),
        sa.Column("drafts", json_type(), nullable=True),
        sa.Column("result", json_type(), nullable=True),
        sa.Column("error", json_type(), nullable=True),
        sa.Column("started_at", ts_type(), nullable=False),
        sa.Column("finished_at", ts_type(), nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'skipped', 'interrupted', 'recorded', 'kept', 'failed', 'adopted')",
            name="ck_rsi_runs_status",
        ),
        _agent_fk("rsi_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_runs"),
        sa.UniqueConstraint("agent_id", "fence", name="uq_rsi_runs_agent_id_fence"),
    )
    op.create_index("ix_rsi_runs_agent_id_status", "rsi_runs", ["agent_id", "status"])
    op.create_index("ix_rsi_runs_agent_id_started_at", "rsi_runs", ["agent_id", "started_at"])
    op.create_table(
        "rsi_replays",
        sa.Column("id", big_id(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("candidate", sa.String(32), nullable=False),
        sa.Column("world_id", sa.String(64), nullable=False),
        sa.Column("trial", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reward", sa.Double(), nullable=False),
        sa.Column("weight", sa.Double(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.Column("result", json_type(), nullable=True),
        sa.Column("created_at", ts_type(), nullable=False),
        sa.CheckConstraint("status IN ('ok', 'missing', 'cancelled')", name="ck_rsi_replays_status"),
        sa.ForeignKeyConstraint(["run_id"], ["rsi_runs.id"], name="fk_rsi_replays_run_id_rsi_runs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_replays"),
        sa.UniqueConstraint("run_id", "candidate", "world_id", "trial",
                            name="uq_rsi_replays_run_id_candidate_world_id_trial"),
    )
    op.create_table(
        "rsi_trajectories",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("io_id", sa.String(255), nullable=True),
        sa.Column("interaction_id", sa.String(255), nullable=True),
        sa.Column("harness_version", sa.String(100), nullable=True),
        sa.Column("harness_name", sa.String(255), nullable=True),
        sa.Column("lineage", sa.String(16), nullable=True),
        sa.Column("provider", sa.String(64), nullable=True),
        sa.Column("model", sa.String(255), nullable=True),
        sa.Column("thinking_level", sa.String(32), nullable=True),
        sa.Column("status", sa.String(16), nullable=True),
        sa.Column("termination_reason", sa.String(64), nullable=True),
        sa.Column("error", sa.String(300), nullable=True),
        sa.Column("steps", json_type(), nullable=False),
        sa.Column("policy_tokens", sa.Integer(), nullable=False),
        sa.Column("usage_by_purpose", json_type(), nullable=False),
        sa.Column("components_fired", json_type(), nullable=False),
        sa.Column("params_read", json_type(), nullable=False),
        sa.Column("final_text_chars", sa.Integer(), nullable=False),
        sa.Column("world_bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", ts_type(), nullable=False),
        _agent_fk("rsi_trajectories"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_trajectories"),
    )
    op.create_index("ix_rsi_trajectories_agent_id_created_at", "rsi_trajectories",
                    ["agent_id", "created_at"])


def downgrade() -> None:
    for table in ("rsi_trajectories", "rsi_replays", "rsi_runs", "rsi_worlds", "rsi_harnesses", "rsi_agents"):
        op.drop_table(table)
