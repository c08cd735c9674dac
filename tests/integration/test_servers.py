"""The real backends the tests and embedded mode start."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from rsi_worker.local.servers import RedisServer


def test_redis_restart_keeps_address_and_drops_keys(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        client = redis.Redis.from_url(server.client_url)
        client.set("k", "v")
        server.restart()
        assert client.get("k") is None
        assert client.ping()
        client.close()


def test_redis_unix_socket(tmp_path: Path) -> None:
    with RedisServer(tmp_path, unix_socket=True) as server:
        assert server.url.startswith("redis+socket://")
        with redis.Redis.from_url(server.client_url) as client:
            assert client.ping()


@pytest.mark.postgres
def test_db_url_fixture_runs_both_backends(db_url: str) -> None:
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("select 1")).scalar() == 1
    engine.dispose()
