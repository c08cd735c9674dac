"""Host retries on the record path (``rsi_common/record_retry.py``) against a real PostgreSQL that is
stopped and started again and a real redis-server that is stopped and started again.

The restart happens inside the client's pause between two attempts (the client's ``_sleep`` is
replaced), so the tests need no timing: the first attempt meets the dead server, the next one the
restarted server.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from rsi_common.client import RsiClient, redis_client
from rsi_common.config import Settings
from rsi_common.db import make_engine, upgrade
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import TurnNotStored
from rsi_worker.local.servers import PostgresServer, RedisServer
from tests.integration.client.conftest import make_world

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> str:
    name = f"retries_{os.getpid()}_{id(pg_server) % 10_000}_{os.urandom(3).hex()}"
    with psycopg.connect(host=str(pg_server.sockdir), port=pg_server.port, user="postgres",
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://postgres@/{name}?host={pg_server.sockdir}&port={pg_server.port}"


@pytest.fixture
def pg_client(pg_url: str, redis_url: str, pg_server: PostgresServer) -> Iterator[RsiClient]:
    engine = make_engine(pg_url)
    upgrade(engine)
    rclient = redis_client(redis_url)
    client = RsiClient(Settings(database_url=pg_url, redis_url=redis_url), engine=engine, redis=rclient,
                       dispatcher=RecordingDispatcher())
    yield client
    if not (pg_server.datadir / "postmaster.pid").exists():
        pg_server.start()  # never leave the session's server down for the next test
    client.close()
    rclient.close()
    engine.dispose()


def stop(server: PostgresServer) -> None:
    """Stop the server (immediate mode) after a checkpoint: the session server commits
    asynchronously, and an immediate stop would lose the last commits' WAL, not what is tested."""
    with psycopg.connect(host=str(server.sockdir), port=server.port, user="postgres", dbname="postgres",
                         autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    server.stop()


def worlds_of(client: RsiClient, io: str) -> int:
    with client.engine.connect() as conn:
        query = sa.text("SELECT count(*) FROM rsi_worlds WHERE io_id = :io")
        return int(conn.execute(query, {"io": io}).scalar_one())


def restarting(start: Callable[[], object], pauses: list[float]) -> Callable[[float], None]:
    """A ``_sleep`` that starts the stopped server in the first pause (and records every pause)."""

    def sleep(seconds: float) -> None:
        if not pauses:
            start()
        pauses.append(seconds)

    return sleep


def test_a_turn_recorded_while_postgresql_restarts_is_stored_once(
    pg_client: RsiClient, pg_server: PostgresServer
) -> None:
    assert pg_client.record_turn("a1", {"world": make_world("io1", 1.0)}).world_id  # the pool is warm
    pauses: list[float] = []
    pg_client._sleep = restarting(pg_server.start, pauses)
    pg_client._clock = lambda: sum(pauses)  # the budget counts the pauses, not a slow server start
    stop(pg_server)
    recorded = pg_client.record_turn("a1", {"world": make_world("io2", 2.0)})
    assert pauses  # the first attempt met the stopped server and was retried
    assert recorded.world_id and recorded.dispatched == "pending"  # io1's lease is held
    assert worlds_of(pg_client, "io2") == 1
    again = pg_client.record_turn("a1", {"world": make_world("io2", 2.0)})  # idempotent by io id
    assert again.world_id == recorded.world_id and worlds_of(pg_client, "io2") == 1


def test_after_the_budget_the_host_is_told_the_turn_was_not_stored(
    pg_client: RsiClient, pg_server: PostgresServer
) -> None:
    pauses: list[float] = []
    pg_client._budget = type(pg_client._budget)(0.2)  # 0.05 + 0.1 s of pauses: three attempts
    pg_client._sleep = pauses.append
    pg_client._clock = lambda: sum(pauses)  # only the pauses spend the budget, not a slow refusal
    stop(pg_server)
    with pytest.raises(TurnNotStored) as caught:
        pg_client.record_turn("a1", {"world": make_world("io3", 3.0)})
    pg_server.start()
    assert isinstance(caught.value.__cause__, OperationalError)
    assert "'io3' of agent 'a1' was not stored: database error OperationalError after 3 attempt" in str(
        caught.value)
    assert pauses == [0.05, 0.1]
    assert worlds_of(pg_client, "io3") == 0  # nothing partial
    assert pg_client.record_turn("a1", {"world": make_world("io3", 3.0)}).world_id  # the host may retry


def test_a_hand_off_while_redis_restarts_is_enqueued_not_deferred(
    tmp_path: Path, redis_srv: RedisServer
) -> None:
    url = f"sqlite:///{tmp_path / 'rsi.db'}"
    engine = make_engine(url)
    upgrade(engine)
    rclient = redis.Redis.from_url(redis_srv.client_url, socket_timeout=1, socket_connect_timeout=1)
    dispatcher = RecordingDispatcher()
    client = RsiClient(Settings(database_url=url, redis_url=redis_srv.url), engine=engine, redis=rclient,
                       dispatcher=dispatcher)
    try:
        pauses: list[float] = []
        client._sleep = restarting(redis_srv.start, pauses)
        redis_srv.stop()
        recorded = client.record_turn("a1", {"world": make_world("io1", 1.0)})
        assert pauses and recorded.dispatched == "enqueued"
        assert len(dispatcher.calls) == 1
        redis_srv.stop()  # down for the whole budget: stored, the trigger left to the sweeper
        client._sleep = lambda _s: None
        assert client.record_turn("a1", {"world": make_world("io2", 2.0)}).dispatched == "deferred"
        assert worlds_of(client, "io2") == 1
    finally:
        client.close()
        rclient.close()
        engine.dispose()
