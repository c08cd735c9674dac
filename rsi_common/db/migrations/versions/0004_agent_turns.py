"""The agent's count of recorded turns, the clock of the record path's amortised retention
(docs/performance/record-path.md).

Revision ID: 0004_agent_turns
Revises: 0003
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_agent_turns"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("rsi_agents",
                  sa.Column("turns", sa.BigInteger(), nullable=False, server_default=sa.text("0")))


def downgrade() -> None:
    with op.batch_alter_table("rsi_agents") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("turns")
