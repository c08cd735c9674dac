"""Dream-RSI trees, cycles and episodes (docs/dream/worlds.md#storage).

Revision ID: 0007_dream
Revises: 0006_evolve

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from rsi_common.db.migrations.coltypes import ts_type

revision: str = "0007_dream"
down_revision: str | None = "0006_evolve"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id() -> sa.Column[int]:
    return sa.Column(
        "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
    )


def _ts(name: str) -> sa.Column[object]:
    return sa.Column(name, ts_type(), nullable=False)


def upgrade() -> None:
    op.create_table(
        "rsi_dream_worlds",
        _id(),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("world_id", sa.String(128), nullable=False),
        sa.Column("task_id", sa.String(128), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("cycle_id", sa.String(64), nullable=True),
        sa.Column("tree", sa.JSON(none_as_null=True), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_dream_worlds"),
        sa.UniqueConstraint("agent_id", "world_id", name="uq_rsi_dream_worlds_agent_id_world_id"),
    )
    op.create_table(
        "rsi_dream_cycles",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("state", sa.JSON(none_as_null=True), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_dream_cycles"),
        sa.UniqueConstraint("agent_id", "iteration", name="uq_rsi_dream_cycles_agent_id_iteration"),
    )
    op.create_table(
        "rsi_dream_episodes",
        _id(),
        sa.Column("cycle_id", sa.String(64), nullable=False),
        sa.Column("label", sa.String(64), nullable=False),
        sa.Column("world_id", sa.String(128), nullable=False),
        sa.Column("beta_key", sa.String(32), nullable=False),
        sa.Column("result", sa.JSON(none_as_null=True), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_dream_episodes"),
        sa.UniqueConstraint(
            "cycle_id",
            "label",
            "world_id",
            "beta_key",
            name="uq_rsi_dream_episodes_cycle_id_label_world_id_beta_key",
        ),
    )


def downgrade() -> None:
    op.drop_table("rsi_dream_episodes")
    op.drop_table("rsi_dream_cycles")
    op.drop_table("rsi_dream_worlds")
