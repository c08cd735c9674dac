"""Goals, autonomy and heartbeats on a real Celery worker (queue ``agents``), redis-server and
PostgreSQL (docs/runtime/goals.md): an autonomous loop reaches its goal through ``goal_complete``;
``rsi.tick`` on the worker posts a due heartbeat once; two tickers racing on PostgreSQL deliver each
beat once. Waits poll SQL state (no bare sleeps)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fakeredis
import pytest
import redis
import sqlalchemy as sa

from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.db import WorldRow, make_engine, session_factory
from rsi_common.db.runtime_models import MessageRow, ScheduleRow
from rsi_common.dispatch import QUEUE_AGENTS, TASK_TICK, KombuDispatcher, RecordingDispatcher
from rsi_common.runtime.heartbeats import fire_due
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.tree import AgentProfile
from rsi_worker.local.servers import RedisServer
from tests.integration.runtime.conftest import AgentsCluster

pytestmark = pytest.mark.timeout(180)


def test_autonomy_reaches_the_goal_and_the_tick_posts_a_heartbeat_on_a_worker(
        tmp_path: Path, redis_srv: RedisServer, pg_url: str) -> None:
    settings = Settings(database_url=pg_url, redis_url=redis_srv.url)
    broker = KombuDispatcher(redis_srv.url)
    client = RsiClient(settings, redis=redis.Redis.from_url(redis_srv.client_url), dispatcher=broker)
    rc = RuntimeClient(client, actor="operator:test")
    try:
        rc.register("A", AgentProfile())
        rc.register("B", AgentProfile())
        rc.set_goal("A", "tidy the notes; finish after 2 turns", 100_000, "sim.done")
        rc.start_autonomy("A", check="sim.done")
        rc.add_heartbeat("B", "check the inbox", every_s=60, label="inbox")
        with client._sessions.begin() as s:
            s.execute(sa.update(ScheduleRow).values(next_at=datetime.now(UTC) - timedelta(hours=3)))
        broker.enqueue(TASK_TICK, [], QUEUE_AGENTS)
        broker.enqueue(TASK_TICK, [], QUEUE_AGENTS)
        with AgentsCluster(tmp_path, pg_url, redis_srv.url, n=1, concurrency=4) as cluster:
            loop = cluster.wait_for("the loop to end", lambda: (lambda a: a if a and a["status"] != "running"
                                                                else None)(rc.autonomy("A")), 120)

            def beat_world() -> list[WorldRow]:
                with cluster.sessions() as s:
                    return list(s.execute(sa.select(WorldRow).where(WorldRow.agent_id == "B")).scalars())

            worlds_b = cluster.wait_for("the heartbeat's turn", beat_world, 60)
        assert (loop["status"], loop["reason"], loop["turns"]) == ("completed", "goal_complete", 3)
        goal = rc.goal("A")
        assert goal is not None and goal["status"] == "completed" and goal["tokens_used"] > 0
        with client._sessions() as s:
            answers = [w.world["outcome"]["final_text"] for w in s.execute(sa.select(WorldRow).where(
                WorldRow.agent_id == "A").order_by(WorldRow.io_id)).scalars()]
            beats = s.execute(sa.select(sa.func.count()).select_from(MessageRow).where(
                MessageRow.kind == "heartbeat")).scalar_one()
        assert answers == ["progress 0", "progress 1", "done"]
        assert beats == 1 and [w.world["input"] for w in worlds_b] == ["[heartbeat inbox] check the inbox"]
    finally:
        client.close()


def test_two_tickers_racing_on_postgresql_post_each_beat_once(pg_url: str) -> None:
    engine = make_engine(pg_url)
    factory = session_factory(engine)
    settings = Settings(database_url=pg_url)
    client = RsiClient(settings, engine=engine, redis=fakeredis.FakeRedis(), dispatcher=RecordingDispatcher())
    rc = RuntimeClient(client, wake=lambda a, s: None)
    try:
        rc.register("A", AgentProfile())
        for i in range(20):
            rc.add_heartbeat("A", f"beat {i}", every_s=60, label=f"b{i}", session=f"s{i}")
        now = datetime.now(UTC) + timedelta(hours=1)
        start = threading.Barrier(2)
        fired: list[list[tuple[str, str]]] = []

        def ticker() -> None:
            start.wait()
            fired.append(fire_due(factory, now))

        threads = [threading.Thread(target=ticker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with factory() as s:
            keys = list(s.execute(sa.select(MessageRow.key)).scalars())
        assert len(keys) == len(set(keys)) == 20 and sum(len(f) for f in fired) == 20
    finally:
        client.close()
        engine.dispose()
