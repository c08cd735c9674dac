"""Migrations create the whole schema on an empty database and it equals the ORM models."""

from __future__ import annotations

import sqlalchemy as sa
from typer.testing import CliRunner

from rsi_common.db import Base, current_revision, head_revision, make_engine, schema_diff, upgrade
from rsi_common.db.migrate import VERSION_TABLE
from rsi_worker.cli import app


def test_upgrade_creates_every_table_matching_the_models(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        assert current_revision(engine) is None
        upgrade(db_url)  # by URL: an engine is made and disposed
        tables = set(sa.inspect(engine).get_table_names())
        assert tables == set(Base.metadata.tables) | {VERSION_TABLE}
        assert current_revision(engine) == head_revision()  # the head read from the script directory
        assert schema_diff(engine) == []
        upgrade(engine)  # a second upgrade is a no-op
        assert schema_diff(engine) == []
    finally:
        engine.dispose()


def test_schema_diff_sees_drift(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        upgrade(engine)
        with engine.begin() as conn:
            conn.execute(sa.text("DROP INDEX ix_rsi_worlds_latest"))
        diff = schema_diff(engine)
        assert [d[0] for d in diff] == ["add_index"]
        assert diff[0][1].name == "ix_rsi_worlds_latest"
    finally:
        engine.dispose()


def test_foreign_tables_are_ignored(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE host_table (id INTEGER PRIMARY KEY)"))
        upgrade(engine)
        assert schema_diff(engine) == []
    finally:
        engine.dispose()


def test_cli_db_upgrade(db_url: str) -> None:
    result = CliRunner().invoke(app, ["db", "upgrade", "--url", db_url])
    assert result.exit_code == 0, result.output
    assert f"revision {head_revision()}" in result.output
    engine = make_engine(db_url)
    try:
        assert schema_diff(engine) == []
    finally:
        engine.dispose()
