"""The regression set of each agent (docs/consolidation/regression.md).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rsi_regressions",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("version", sa.String(100), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("world_id", sa.String(64), nullable=False),
        sa.Column("lesson", sa.String(300), nullable=False),
        sa.Column("world", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("signals", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("interaction_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("checks", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["rsi_agents.id"], name="fk_rsi_regressions_agent_id_rsi_agents", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_regressions"),
        sa.UniqueConstraint(
            "agent_id", "version", "world_id", name="uq_rsi_regressions_agent_id_version_world_id"
        ),
    )


def downgrade() -> None:
    op.drop_table("rsi_regressions")
