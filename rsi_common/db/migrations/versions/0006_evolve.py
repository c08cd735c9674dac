"""Offline evolve runs on task suites (docs/algorithm/evolve.md#durable-state).

Revision ID: 0006_evolve
Revises: 0005_conversations

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from rsi_common.db.migrations.coltypes import big_id, json_type, ts_type

revision: str = "0006_evolve"
down_revision: str | None = "0005_conversations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _evolve_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["evolve"], ["rsi_evolves.name"], name=f"fk_{table}_evolve_rsi_evolves", ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "rsi_suites",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec", json_type(), nullable=False),
        sa.Column("created_at", ts_type(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_rsi_suites"),
    )
    op.create_table(
        "rsi_evolves",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("suite", sa.String(64), nullable=False),
        sa.Column("config", json_type(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stop_requested", sa.Boolean(), nullable=False),
        sa.Column("state", json_type(), nullable=True),
        sa.Column("created_at", ts_type(), nullable=False),
        sa.Column("updated_at", ts_type(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_rsi_evolves"),
    )
    op.create_table(
        "rsi_evolve_rounds",
        sa.Column("id", big_id(), autoincrement=True, nullable=False),
        sa.Column("evolve", sa.String(64), nullable=False),
        sa.Column("t", sa.Integer(), nullable=False),
        sa.Column("before", json_type(), nullable=True),
        sa.Column("analysis", json_type(), nullable=True),
        sa.Column("directives", json_type(), nullable=True),
        sa.Column("drafts", json_type(), nullable=True),
        sa.Column("decision", json_type(), nullable=True),
        _evolve_fk("rsi_evolve_rounds"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_evolve_rounds"),
        sa.UniqueConstraint("evolve", "t", name="uq_rsi_evolve_rounds_evolve_t"),
    )
    op.create_table(
        "rsi_evolve_trials",
        sa.Column("id", big_id(), autoincrement=True, nullable=False),
        sa.Column("evolve", sa.String(64), nullable=False),
        sa.Column("t", sa.Integer(), nullable=False),
        sa.Column("candidate", sa.String(32), nullable=False),
        sa.Column("task_id", sa.String(128), nullable=False),
        sa.Column("trial", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reward", sa.Double(), nullable=False),
        sa.Column("weight", sa.Double(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.Column("result", json_type(), nullable=True),
        sa.Column("created_at", ts_type(), nullable=False),
        _evolve_fk("rsi_evolve_trials"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_evolve_trials"),
        sa.UniqueConstraint(
            "evolve",
            "t",
            "candidate",
            "task_id",
            "trial",
            "attempt",
            name="uq_rsi_evolve_trials_evolve_t_candidate_task_id_trial_attempt",
        ),
    )


def downgrade() -> None:
    op.drop_table("rsi_evolve_trials")
    op.drop_table("rsi_evolve_rounds")
    op.drop_table("rsi_evolves")
    op.drop_table("rsi_suites")
