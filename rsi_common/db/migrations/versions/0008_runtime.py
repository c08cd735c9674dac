"""The agent runtime's tables (docs/runtime/README.md#tables) and its columns on existing tables.

New: ``rsi_agent_runtime``, ``rsi_sessions``, ``rsi_subagents``, ``rsi_messages``, ``rsi_goals``,
``rsi_schedules``, ``rsi_autonomy``, ``rsi_spend``, ``rsi_events``. Changed: ``rsi_worlds`` gains
``tainted`` and ``taint_reason``; ``rsi_harnesses`` gains ``origin``, ``revoked_at`` and
``revoked_reason``. ``rsi_runs.kind`` is a free string, so its new value ``refine`` needs no change.

Revision ID: 0008_runtime
Revises: 0007_dream
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from rsi_common.db.migrations.coltypes import big_id, json_type, ts_type

revision: str = "0008_runtime"
down_revision: str | None = "0007_dream"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = ts_type()
_ID = big_id()
_JSON = json_type()
_TABLES = (
    "rsi_agent_runtime",
    "rsi_sessions",
    "rsi_subagents",
    "rsi_messages",
    "rsi_goals",
    "rsi_schedules",
    "rsi_autonomy",
    "rsi_spend",
    "rsi_events",
)


def upgrade() -> None:
    op.create_table(
        "rsi_events",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("agent_id", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("detail", _JSON, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rsi_events")),
    )
    op.create_index("ix_rsi_events_agent_id_id", "rsi_events", ["agent_id", "id"], unique=False)
    op.create_table(
        "rsi_spend",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=600), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("root_id", sa.String(length=255), nullable=False),
        sa.Column("agent_id", sa.String(length=255), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("usd", sa.Double(), nullable=False),
        sa.Column("model_calls", sa.Integer(), nullable=False),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("spawns", sa.Integer(), nullable=False),
        sa.Column("messages", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rsi_spend")),
        sa.UniqueConstraint("key", name=op.f("uq_rsi_spend_key")),
    )
    op.create_index("ix_rsi_spend_agent_id_day", "rsi_spend", ["agent_id", "day"], unique=False)
    op.create_index("ix_rsi_spend_root_id_day", "rsi_spend", ["root_id", "day"], unique=False)
    op.create_table(
        "rsi_agent_runtime",
        sa.Column("agent_id", sa.String(length=255), nullable=False),
        sa.Column("root_id", sa.String(length=255), nullable=False),
        sa.Column("parent_id", sa.String(length=255), nullable=True),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("spec", sa.String(length=64), nullable=True),
        sa.Column("profile", _JSON, nullable=False),
        sa.Column("lifecycle", sa.String(length=16), nullable=False),
        sa.Column("caps", _JSON, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.CheckConstraint(
            "lifecycle IN ('admitted', 'running', 'idle', 'inactive', 'failed', 'deleted')",
            name=op.f("ck_rsi_agent_runtime_lifecycle"),
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["rsi_agents.id"],
            name=op.f("fk_rsi_agent_runtime_agent_id_rsi_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("agent_id", name=op.f("pk_rsi_agent_runtime")),
    )
    op.create_index("ix_rsi_agent_runtime_parent_id", "rsi_agent_runtime", ["parent_id"], unique=False)
    op.create_index("ix_rsi_agent_runtime_root_id", "rsi_agent_runtime", ["root_id"], unique=False)
    op.create_table(
        "rsi_autonomy",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=255), nullable=False),
        sa.Column("session", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=100), nullable=True),
        sa.Column("budget", _JSON, nullable=False),
        sa.Column("check", sa.String(length=64), nullable=True),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("usd", sa.Double(), nullable=False),
        sa.Column("stall", _JSON, nullable=False),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("finished_at", _TS, nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'completed', 'stopped')", name=op.f("ck_rsi_autonomy_status")
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["rsi_agents.id"],
            name=op.f("fk_rsi_autonomy_agent_id_rsi_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rsi_autonomy")),
    )
    op.create_index("ix_rsi_autonomy_agent_id_status", "rsi_autonomy", ["agent_id", "status"], unique=False)
    op.create_table(
        "rsi_goals",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=255), nullable=False),
        sa.Column("objective", sa.Text(), nullable=False),
        sa.Column("token_budget", sa.BigInteger(), nullable=True),
        sa.Column("tokens_used", sa.BigInteger(), nullable=False),
        sa.Column("check", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.CheckConstraint(
            "status IN ('active', 'paused', 'completed', 'budget_exhausted', 'cancelled')",
            name=op.f("ck_rsi_goals_status"),
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["rsi_agents.id"], name=op.f("fk_rsi_goals_agent_id_rsi_agents"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rsi_goals")),
    )
    op.create_index("ix_rsi_goals_agent_id_status", "rsi_goals", ["agent_id", "status"], unique=False)
    op.create_table(
        "rsi_messages",
        sa.Column("seq", _ID, autoincrement=True, nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=600), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("sender", sa.String(length=255), nullable=True),
        sa.Column("relationship", sa.String(length=16), nullable=False),
        sa.Column("recipient", sa.String(length=255), nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=True),
        sa.Column("hops", sa.Integer(), nullable=False),
        sa.Column("root_id", sa.String(length=255), nullable=False),
        sa.Column("claimed_io", sa.String(length=255), nullable=True),
        sa.Column("claimed_until", _TS, nullable=True),
        sa.Column("consumed_io", sa.String(length=255), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["recipient"],
            ["rsi_agents.id"],
            name=op.f("fk_rsi_messages_recipient_rsi_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_rsi_messages")),
        sa.UniqueConstraint("id", name=op.f("uq_rsi_messages_id")),
        sa.UniqueConstraint("key", name=op.f("uq_rsi_messages_key")),
    )
    op.create_index(
        "ix_rsi_messages_mailbox",
        "rsi_messages",
        ["recipient", "session_id", "consumed_io", "seq"],
        unique=False,
    )
    op.create_table(
        "rsi_schedules",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=255), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.Column("instruction", sa.Text(), nullable=False),
        sa.Column("every_s", sa.Integer(), nullable=True),
        sa.Column("cron", sa.String(length=100), nullable=True),
        sa.Column("session", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("next_at", _TS, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.CheckConstraint("status IN ('active', 'paused', 'deleted')", name=op.f("ck_rsi_schedules_status")),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["rsi_agents.id"],
            name=op.f("fk_rsi_schedules_agent_id_rsi_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rsi_schedules")),
    )
    op.create_index("ix_rsi_schedules_status_next_at", "rsi_schedules", ["status", "next_at"], unique=False)
    op.create_table(
        "rsi_sessions",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("agent_id", sa.String(length=255), nullable=False),
        sa.Column("session", sa.String(length=255), nullable=False),
        sa.Column("messages", _JSON, nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("slice", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("pending", _JSON, nullable=True),
        sa.Column("wait_deadline", _TS, nullable=True),
        sa.Column("updated_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["rsi_agents.id"],
            name=op.f("fk_rsi_sessions_agent_id_rsi_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rsi_sessions")),
        sa.UniqueConstraint("agent_id", "session", name=op.f("uq_rsi_sessions_agent_id_session")),
    )
    op.create_table(
        "rsi_subagents",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("parent_agent", sa.String(length=255), nullable=False),
        sa.Column("parent_session", sa.String(length=255), nullable=False),
        sa.Column("parent_io", sa.String(length=255), nullable=False),
        sa.Column("tool_use_id", sa.String(length=255), nullable=False),
        sa.Column("child_agent", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.String(length=64), nullable=False),
        sa.Column("spec_version", sa.String(length=100), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("error", sa.String(length=300), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("settled_at", _TS, nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'awaiting', 'completed', 'failed', 'cancelled')",
            name=op.f("ck_rsi_subagents_status"),
        ),
        sa.ForeignKeyConstraint(
            ["parent_agent"],
            ["rsi_agents.id"],
            name=op.f("fk_rsi_subagents_parent_agent_rsi_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rsi_subagents")),
        sa.UniqueConstraint("parent_agent", "name", name=op.f("uq_rsi_subagents_parent_agent_name")),
        sa.UniqueConstraint(
            "parent_agent",
            "parent_io",
            "tool_use_id",
            name=op.f("uq_rsi_subagents_parent_agent_parent_io_tool_use_id"),
        ),
    )
    op.create_index("ix_rsi_subagents_child_agent", "rsi_subagents", ["child_agent"], unique=False)
    op.create_index(
        "ix_rsi_subagents_parent_agent_parent_session_status",
        "rsi_subagents",
        ["parent_agent", "parent_session", "status"],
        unique=False,
    )
    op.create_index("ix_rsi_subagents_status", "rsi_subagents", ["status"], unique=False)
    op.add_column("rsi_harnesses", sa.Column("origin", sa.String(length=16), nullable=True))
    op.add_column("rsi_harnesses", sa.Column("revoked_at", _TS, nullable=True))
    op.add_column("rsi_harnesses", sa.Column("revoked_reason", sa.String(length=500), nullable=True))
    op.add_column("rsi_worlds", sa.Column("tainted", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.add_column("rsi_worlds", sa.Column("taint_reason", sa.String(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rsi_worlds") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("taint_reason")
        batch.drop_column("tainted")
    with op.batch_alter_table("rsi_harnesses") as batch:
        batch.drop_column("revoked_reason")
        batch.drop_column("revoked_at")
        batch.drop_column("origin")
    for table in reversed(_TABLES):
        op.drop_table(table)
