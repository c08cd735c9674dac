"""Schema migrations (Alembic), configured programmatically: no ``alembic.ini`` at run time.

The scripts live in ``rsi_common/db/migrations`` (``env.py``, ``versions/``). Alembic's version
table is ``rsi_alembic_version`` and autogenerate only looks at ``rsi_*`` tables, so the schema can
share a database with the host application (and with the host's own Alembic history).

``rsi db upgrade`` calls :func:`upgrade`; on an empty database it creates every table.

Alembic is imported inside the functions that use it: it pulls in Mako and Pygments (about 1 s of
CPU), which every process importing :mod:`rsi_common.db` (workers, ``rsi`` and ``celery -A``
commands) would otherwise pay at start-up without migrating anything (docs/dev/testing.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from rsi_common.db.engine import make_engine
from rsi_common.db.models import Base

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "MIGRATIONS_DIR",
    "TABLE_PREFIX",
    "VERSION_TABLE",
    "alembic_config",
    "current_revision",
    "head_revision",
    "include_name",
    "schema_diff",
    "upgrade",
]

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
VERSION_TABLE = "rsi_alembic_version"
TABLE_PREFIX = "rsi_"


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic ``include_name`` hook: only this project's tables (``rsi_*``) are compared."""
    if type_ == "table":
        return bool(name) and str(name).startswith(TABLE_PREFIX) and name != VERSION_TABLE
    return True


def alembic_config(url: str | sa.URL | None = None, *, connection: Connection | None = None) -> Config:
    """Alembic configuration for rsi-worker's migrations.

    Args:
        url: database URL (used by ``env.py`` when no connection is given).
        connection: an open connection the migration runs on (takes precedence over ``url``).
    """
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        text = url.render_as_string(hide_password=False) if isinstance(url, sa.URL) else url
        cfg.set_main_option("sqlalchemy.url", text.replace("%", "%%"))  # configparser interpolation
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine_or_url: Engine | str | sa.URL, revision: str = "head") -> None:
    """Migrate the database to ``revision`` (default: the newest) in one transaction.

    Args:
        engine_or_url: an engine (not disposed) or a URL (an engine is made and disposed).
        revision: Alembic revision target.
    """
    from alembic import command

    engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(connection=conn), revision)
    finally:
        if engine is not engine_or_url:
            engine.dispose()


def head_revision() -> str:
    """The newest revision id of the migration scripts."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` before the first upgrade)."""
    from alembic.migration import MigrationContext

    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return ctx.get_current_revision()


def schema_diff(engine: Engine) -> list[Any]:
    """Differences between the database's ``rsi_*`` tables and the ORM metadata.

    Returns:
        Alembic autogenerate's diff list (empty ⇔ the migrated schema equals the models).
    """
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "version_table": VERSION_TABLE,
                "include_name": include_name,
                "compare_type": True,
                "target_metadata": Base.metadata,
            },
        )
        return list(compare_metadata(ctx, Base.metadata))
