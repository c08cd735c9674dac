"""Session-wide real backends: a private redis-server and a throw-away PostgreSQL cluster.

An unreachable backend is a failure, never a skip (STYLE §Absorb 3). Database tests take the
``db_url`` fixture, which runs them once on SQLite and once on PostgreSQL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from rsi_worker.local.servers import PostgresServer, RedisServer
from tests.support.migrated import copy_migrated_sqlite

# Settings are read from the environment when constructed: keep the host's RSI_* out of tests.
for _key in [k for k in os.environ if k.upper().startswith("RSI_")]:
    del os.environ[_key]

# No per-example deadline (Hypothesis' default is 200 ms of wall time: a loaded machine fails it).
hypothesis_settings.register_profile("rsi", deadline=None)
hypothesis_settings.load_profile("rsi")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server for the whole session (flush per test with ``redis_client``)."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """URL of the session redis-server, flushed before each test."""
    import redis

    with redis.Redis.from_url(redis_server.client_url) as r:
        r.flushall()
    yield redis_server.client_url


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A real PostgreSQL cluster for the whole session."""
    server = PostgresServer(tmp_path_factory.mktemp("pg")).start()
    yield server
    server.stop()


_db_counter = iter(range(1_000_000))
_from_template: set[str] = set()
"""Database URLs made as copies of a migrated template (``engine`` does not migrate them again)."""


@pytest.fixture(scope="session")
def pg_template(pg_server: PostgresServer) -> str:
    """Name of a migrated PostgreSQL database, built once per session, that ``db_url`` clones with
    ``CREATE DATABASE … TEMPLATE`` for tests that take ``engine`` (never connect to it)."""
    import psycopg

    from rsi_common.db import make_engine, upgrade

    name = f"rsi_template_{os.getpid()}"
    with psycopg.connect(host=str(pg_server.sockdir), port=pg_server.port, user="postgres",
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    eng = make_engine(f"postgresql+psycopg://postgres@/{name}?host={pg_server.sockdir}&port={pg_server.port}")
    try:
        upgrade(eng)
    finally:
        eng.dispose()  # CREATE DATABASE … TEMPLATE needs the template without connections
    return name


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database URL: a SQLite file, or a new database on the session PostgreSQL.

    Empty, unless the test also takes ``engine``: then it is already migrated, a copy of a template
    the migrations built once per session (docs/dev/testing.md), and ``engine`` does not migrate it
    again. A test that needs an empty database takes ``db_url`` without ``engine``.
    """
    migrated = "engine" in request.fixturenames
    if request.param == "sqlite":
        path = tmp_path / "rsi.db"
        url = f"sqlite:///{path}"
        if migrated and copy_migrated_sqlite(path):
            _from_template.add(url)
        return url
    server: PostgresServer = request.getfixturevalue("pg_server")
    template = request.getfixturevalue("pg_template") if migrated else None
    url = new_pg_database(server, template)
    if template:
        _from_template.add(url)
    return url


def new_pg_database(server: PostgresServer, template: str | None = None) -> str:
    """A new database on the session PostgreSQL (a copy of ``template`` when given); its URL."""
    import psycopg

    name = f"t{next(_db_counter)}_{os.getpid()}"
    with psycopg.connect(host=str(server.sockdir), port=server.port, user="postgres",
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    return f"postgresql+psycopg://postgres@/{name}?host={server.sockdir}&port={server.port}"


@pytest.fixture
def engine(db_url: str) -> Iterator[Any]:
    """A migrated, empty database (SQLite and PostgreSQL, through ``db_url``)."""
    from rsi_common.db import make_engine, upgrade

    eng = make_engine(db_url)
    if db_url not in _from_template:
        upgrade(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def redis_srv(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server for one test (tests that restart it or run worker processes)."""
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()
