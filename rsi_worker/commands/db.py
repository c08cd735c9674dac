"""``rsi db``: the database schema (Alembic migrations)."""

from __future__ import annotations

import typer

db = typer.Typer(no_args_is_help=True, help="Database schema (Alembic migrations).")


@db.command("upgrade")
def db_upgrade(
    url: str | None = typer.Option(None, "--url", help="SQLAlchemy URL (default: RSI_DATABASE_URL)."),
) -> None:
    """Create or migrate rsi-worker's tables (rsi_*) to the newest schema revision."""
    from rsi_common.config import Settings
    from rsi_common.db import current_revision, make_engine, upgrade
    from rsi_common.errors import SettingsError
    from rsi_common.settings_checks import check_database_url

    if url is not None:
        try:
            check_database_url(url)
        except ValueError as exc:
            raise SettingsError(f"--url: {exc}") from None
    engine = make_engine(url or Settings().database_url)
    try:
        upgrade(engine)
        typer.echo(f"rsi database schema at revision {current_revision(engine)}")
    finally:
        engine.dispose()
