"""Fixtures of the coordination contract tests: every test runs on a real redis-server and on
fakeredis (``fakeredis[lua]``), through the same :class:`~rsi_common.coord.Coordinator`."""

from __future__ import annotations

from collections.abc import Iterator

import fakeredis
import pytest
import redis


@pytest.fixture(params=["redis", "fakeredis"])
def redis_client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """A flushed client: the session redis-server, or a fresh in-process fakeredis server."""
    if request.param == "redis":
        client: redis.Redis = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    else:
        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    yield client
    client.close()


def run_keys(client: redis.Redis) -> list[str]:
    """Every key in the database, decoded and sorted."""
    return sorted(k.decode() if isinstance(k, bytes) else k for k in client.keys("*"))
