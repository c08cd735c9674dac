"""Migrated databases for tests without running the migrations per test (docs/dev/testing.md).

The Alembic migrations run once per test process into a template: a SQLite file that is copied for
each test, and a PostgreSQL template database that ``CREATE DATABASE … TEMPLATE`` clones. A copy
is the same schema the migrations build (``tests/integration/db/test_migrations.py`` still runs
them on empty databases and compares the result with the models).
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

import sqlalchemy as sa

from rsi_common.db import make_engine, upgrade

_lock = threading.Lock()
_sqlite_template: Path | None = None


def sqlite_template() -> Path:
    """A migrated SQLite file (built on first use, removed when the process exits); never write it."""
    global _sqlite_template
    with _lock:
        if _sqlite_template is None:
            tmp = Path(tempfile.mkdtemp(prefix="rsi-sqlite-template-"))
            atexit.register(shutil.rmtree, tmp, True)
            path = tmp / "rsi.db"
            engine = make_engine(f"sqlite:///{path}")
            try:
                upgrade(engine)
            finally:
                engine.dispose()
            with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the copy is the file alone
            wal = tmp / "rsi.db-wal"
            assert not wal.exists() or wal.stat().st_size == 0, "the template's WAL was not folded in"
            _sqlite_template = path
        return _sqlite_template


def copy_migrated_sqlite(path: Path) -> bool:
    """Make ``path`` a migrated SQLite database (a copy of the template) if it does not exist yet.

    Returns True when it was copied, False when ``path`` already existed (left untouched).
    """
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(sqlite_template(), path)
    return True


def migrated_sqlite_url(path: Path) -> str:
    """``sqlite:///path`` of a migrated database (copied from the template when it does not exist)."""
    copy_migrated_sqlite(path)
    return f"sqlite:///{path}"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL, or None (another backend, memory, a ``file:`` URI)."""
    u = sa.make_url(url)
    db = u.database
    if u.get_backend_name() != "sqlite" or not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db).expanduser()


def migrate_or_copy(url: str) -> bool:
    """Prepare ``url`` for use: a SQLite file that does not exist yet becomes a template copy (True);
    anything else is left for the caller to migrate (False)."""
    path = sqlite_file(url)
    return path is not None and copy_migrated_sqlite(path)
