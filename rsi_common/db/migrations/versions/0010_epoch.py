"""The pool epoch: every change to an agent's worlds stamped by database triggers, so a no-signal run
reads only the rows changed since its process's last pool read
(docs/performance/consolidation.md#the-no-signal-path).

* ``rsi_agents.pool_epoch``: the last stamp given to one of the agent's worlds (``0``: none yet);
* ``rsi_agents.pool_floor``: the greatest ``clock`` a world of the agent had when it was deleted or
  when its ``clock`` or ``agent_id`` changed (``NULL``: never);
* ``rsi_worlds.stamp``: the agent's ``pool_epoch`` when the row was inserted or one of the columns
  the pool read returns (:data:`STAMPED`) last changed; index ``(agent_id, stamp)``.

The triggers run for every writer, present and future, on both backends: an insert or an update of a
:data:`STAMPED` column bumps the agent's ``pool_epoch`` and stamps the row with it (in the statement,
under the agent row's lock: stamps are given in commit order); a delete, or an update of ``clock`` or
``agent_id``, raises the old agent's ``pool_floor`` to the row's old ``clock``.

Revision ID: 0010_epoch
Revises: 0009_run_inputs

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_epoch"
down_revision: str | None = "0009_run_inputs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STAMPED = ("id", "agent_id", "io_id", "interaction_id", "seq", "clock", "replayable", "signals", "tainted",
           "harness_version", "model", "provider", "world")
"""The columns whose update stamps the row: every column a run's pool read or its decision reads."""

TRIGGERS = ("rsi_worlds_pool_insert", "rsi_worlds_pool_update", "rsi_worlds_pool_delete",
            "rsi_worlds_pool_move")

_FLOOR = ("pool_floor = CASE WHEN pool_floor IS NULL OR pool_floor < OLD.clock THEN OLD.clock "
          "ELSE pool_floor END")

_SQLITE_STAMP = """
    UPDATE rsi_agents SET pool_epoch = pool_epoch + 1 WHERE id = NEW.agent_id;
    UPDATE rsi_worlds SET stamp = (SELECT pool_epoch FROM rsi_agents WHERE id = NEW.agent_id)
    WHERE id = NEW.id;
"""

_SQLITE = (
    f"CREATE TRIGGER rsi_worlds_pool_insert AFTER INSERT ON rsi_worlds BEGIN {_SQLITE_STAMP} END",
    f"CREATE TRIGGER rsi_worlds_pool_update AFTER UPDATE OF {', '.join(STAMPED)} ON rsi_worlds "
    f"BEGIN {_SQLITE_STAMP} END",
    f"CREATE TRIGGER rsi_worlds_pool_delete AFTER DELETE ON rsi_worlds "
    f"BEGIN UPDATE rsi_agents SET {_FLOOR} WHERE id = OLD.agent_id; END",
    f"CREATE TRIGGER rsi_worlds_pool_move AFTER UPDATE OF clock, agent_id ON rsi_worlds "
    f"BEGIN UPDATE rsi_agents SET {_FLOOR} WHERE id = OLD.agent_id; END",
)

_POSTGRESQL = (
    """CREATE FUNCTION rsi_worlds_pool_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE rsi_agents SET pool_epoch = pool_epoch + 1 WHERE id = NEW.agent_id
        RETURNING pool_epoch INTO NEW.stamp;
        IF NOT FOUND THEN NEW.stamp := 0; END IF;  -- no such agent: the foreign key refuses the row
        RETURN NEW;
    END $$""",
    f"""CREATE FUNCTION rsi_worlds_pool_floor() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE rsi_agents SET {_FLOOR} WHERE id = OLD.agent_id;
        RETURN NULL;
    END $$""",
    "CREATE TRIGGER rsi_worlds_pool_insert BEFORE INSERT ON rsi_worlds "
    "FOR EACH ROW EXECUTE PROCEDURE rsi_worlds_pool_stamp()",
    f"CREATE TRIGGER rsi_worlds_pool_update BEFORE UPDATE OF {', '.join(STAMPED)} ON rsi_worlds "
    "FOR EACH ROW EXECUTE PROCEDURE rsi_worlds_pool_stamp()",
    "CREATE TRIGGER rsi_worlds_pool_delete AFTER DELETE ON rsi_worlds "
    "FOR EACH ROW EXECUTE PROCEDURE rsi_worlds_pool_floor()",
    "CREATE TRIGGER rsi_worlds_pool_move AFTER UPDATE OF clock, agent_id ON rsi_worlds "
    "FOR EACH ROW EXECUTE PROCEDURE rsi_worlds_pool_floor()",
)


def upgrade() -> None:
    op.add_column("rsi_agents",
                  sa.Column("pool_epoch", sa.BigInteger(), nullable=False, server_default=sa.text("0")))
    op.add_column("rsi_agents", sa.Column("pool_floor", sa.Double(), nullable=True))
    op.add_column("rsi_worlds",
                  sa.Column("stamp", sa.BigInteger(), nullable=False, server_default=sa.text("0")))
    op.create_index("ix_rsi_worlds_stamp", "rsi_worlds", ["agent_id", "stamp"])
    for ddl in _POSTGRESQL if op.get_bind().dialect.name == "postgresql" else _SQLITE:
        op.execute(ddl)


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON rsi_worlds" if postgresql else ""))
    if postgresql:
        op.execute("DROP FUNCTION IF EXISTS rsi_worlds_pool_stamp()")
        op.execute("DROP FUNCTION IF EXISTS rsi_worlds_pool_floor()")
    op.drop_index("ix_rsi_worlds_stamp", table_name="rsi_worlds")
    with op.batch_alter_table("rsi_worlds") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("stamp")
    with op.batch_alter_table("rsi_agents") as batch:
        batch.drop_column("pool_floor")
        batch.drop_column("pool_epoch")
