"""API tokens (stored as hashes) and the audit log of the service (docs/service/access.md).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rsi_tokens",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("scopes", sa.String(64), nullable=False),
        sa.Column("agent_prefix", sa.String(128), nullable=True),
        sa.Column("rate_per_min", sa.Integer(), nullable=True),
        sa.Column("created_by", sa.String(100), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_rsi_tokens_token_hash"),
    )
    op.create_table(
        "rsi_audit",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True,
                  nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("token_id", sa.String(32), nullable=True),
        sa.Column("token_name", sa.String(100), nullable=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=True),
        sa.Column("target", sa.String(300), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.JSON(none_as_null=True), nullable=True),
        sa.CheckConstraint("outcome IN ('ok', 'refused', 'failed')", name="ck_rsi_audit_outcome"),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_audit"),
    )
    op.create_index("ix_rsi_audit_agent_id_id", "rsi_audit", ["agent_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_rsi_audit_agent_id_id", table_name="rsi_audit")
    op.drop_table("rsi_audit")
    op.drop_table("rsi_tokens")
