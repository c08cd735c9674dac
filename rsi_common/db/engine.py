"""Engines and sessions for SQLite (embedded) and PostgreSQL (distributed).

Transactions. Repository functions run inside the caller's transaction
(``with factory.begin() as session: ...``) and never commit themselves. Functions that read
then write (``seq`` numbering, fenced final write, retention) first lock the agent row:

* **PostgreSQL** — ``SELECT … FOR UPDATE`` on the ``rsi_agents`` row serialises writers of one
  agent; other agents proceed in parallel (isolation READ COMMITTED).
* **SQLite** — the engine emits ``BEGIN IMMEDIATE`` for every transaction, so a transaction holds
  the database's write lock from its first statement and a read-then-write cannot be invalidated
  by a concurrent writer (a deferred ``BEGIN`` would fail with ``SQLITE_BUSY`` on upgrade). Writers
  wait up to the busy timeout; WAL mode keeps readers of other connections unblocked. A read-only
  caller may ask for a deferred transaction with the execution option
  ``{"sqlite_begin": "DEFERRED"}`` (``session.connection(execution_options=...)`` as the first
  statement, or ``Session(execution_options=...)``).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["SQLITE_BUSY_TIMEOUT_MS", "make_engine", "session_factory"]

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for the write lock before failing."""

_BEGIN_MODES = ("DEFERRED", "IMMEDIATE", "EXCLUSIVE")

json_dumps = functools.partial(json.dumps, allow_nan=False)
"""Serializer of JSON columns: NaN and infinities are refused on every backend (PostgreSQL's ``json``
refuses them; SQLite would store them silently)."""


def make_engine(url: str | sa.URL, **kwargs: Any) -> Engine:
    """Create an engine configured for rsi-worker.

    JSON columns are serialized with :data:`json_dumps` (NaN refused) on every backend.
    SQLite: WAL journal, ``busy_timeout`` = :data:`SQLITE_BUSY_TIMEOUT_MS`, foreign keys on,
    ``synchronous=NORMAL``, ``BEGIN IMMEDIATE`` transactions (module docstring); the parent
    directory of a file database is created. PostgreSQL and others: ``pool_pre_ping``.

    Args:
        url: SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://…``).
        **kwargs: passed to :func:`sqlalchemy.create_engine`.

    Returns:
        The engine; dispose of it when done.
    """
    u = sa.make_url(url)
    kwargs.setdefault("json_serializer", json_dumps)
    if u.get_backend_name() != "sqlite":
        kwargs.setdefault("pool_pre_ping", True)
        return sa.create_engine(u, **kwargs)
    if u.database and u.database != ":memory:" and not u.database.startswith("file:"):
        Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    connect_args = dict(kwargs.pop("connect_args", {}))
    connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
    engine = sa.create_engine(u, connect_args=connect_args, **kwargs)
    memory = not u.database or u.database == ":memory:"

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        # The driver must not open transactions itself: SQLAlchemy's "begin" event emits them.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            if not memory:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = str(conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")).upper()
        if mode not in _BEGIN_MODES:
            raise ValueError(f"sqlite_begin must be one of {_BEGIN_MODES}, got {mode!r}")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory bound to ``engine``.

    Objects stay readable after commit (``expire_on_commit=False``): repository functions return
    ORM rows that callers use after the transaction ended.
    """
    return sessionmaker(bind=engine, expire_on_commit=False)
