"""Alembic environment of rsi-worker (configured by :func:`rsi_common.db.migrate.alembic_config`).

Online only: runs on ``config.attributes["connection"]`` when given, else on an engine made from
``sqlalchemy.url``. SQLite migrations use batch mode (``ALTER TABLE`` by table copy).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from rsi_common.db.engine import make_engine
from rsi_common.db.migrate import VERSION_TABLE, include_name
from rsi_common.db.models import Base


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_name=include_name,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no connection and no sqlalchemy.url: use rsi_common.db.migrate.upgrade()")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported; run `rsi db upgrade`")
_run_online()
