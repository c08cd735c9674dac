"""Conversation history of the ``Agent`` façade (docs/host/agent.md#conversation-history).

Revision ID: 0005_conversations
Revises: 0004_agent_turns

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_conversations"
down_revision: str | None = "0004_agent_turns"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rsi_conversations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True,
                  nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("conversation_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("io_id", sa.String(255), nullable=False),
        sa.Column("messages", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_rsi_conversations"),
        sa.UniqueConstraint("agent_id", "conversation_id", "seq",
                            name="uq_rsi_conversations_agent_id_conversation_id_seq"),
        sa.UniqueConstraint("agent_id", "io_id", name="uq_rsi_conversations_agent_id_io_id"),
    )


def downgrade() -> None:
    op.drop_table("rsi_conversations")
