"""The recorded inputs of a run, for replaying it (docs/operations/chaos.md#reproducible-runs).

Revision ID: 0009_run_inputs
Revises: 0008_runtime

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from rsi_common.db.migrations.coltypes import json_type, ts_type

revision: str = "0009_run_inputs"
down_revision: str | None = "0008_runtime"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rsi_run_inputs",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("inputs", json_type(), nullable=False),
        sa.Column("created_at", ts_type(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["rsi_runs.id"], name="fk_rsi_run_inputs_run_id_rsi_runs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", name="pk_rsi_run_inputs"),
    )


def downgrade() -> None:
    op.drop_table("rsi_run_inputs")
