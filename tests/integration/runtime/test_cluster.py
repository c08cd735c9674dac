"""The agent runtime on real Celery worker processes (queue ``agents``), a real redis-server and
PostgreSQL (docs/runtime/README.md#turns): one module, one cluster start per test, queues drained by
waiting on SQL state (no bare sleeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.db import session_factory
from rsi_common.db.runtime_models import SessionRow, SpendRow, SubagentRow
from rsi_common.dispatch import QUEUE_AGENTS, TASK_AGENT_TURN, KombuDispatcher, RecordingDispatcher
from rsi_common.runtime.caps import resolve_caps
from rsi_common.runtime.messages import Sender, send
from rsi_common.runtime.tree import AgentProfile, register
from rsi_worker.local.servers import RedisServer
from tests.integration.runtime.conftest import AgentsCluster
from tests.support.cluster import Cluster
from tests.support.runtime_policy import CATALOG, LEAD, SLOW_KEY

pytestmark = pytest.mark.timeout(180)
FACTORY = "tests.support.runtime_policy:delegating"


def _start(url: str, server: RedisServer, text: str) -> Any:
    """Register the lead ``P``, post ``text`` as an operator and enqueue its turn."""
    settings = Settings(database_url=url, redis_url=server.url)
    client = RsiClient(settings, redis=redis.Redis.from_url(server.client_url),
                       dispatcher=RecordingDispatcher())
    sessions = session_factory(client.engine)
    with sessions.begin() as s:
        register(s, "P", AgentProfile(system_parts=(("lead", LEAD),), subagents=CATALOG))
        send(s, client.redis, settings.runtime, resolve_caps(settings.runtime), Sender(None, io="op1"), "P",
             text)
    KombuDispatcher(server.url).enqueue(TASK_AGENT_TURN, ["P", "main"], QUEUE_AGENTS)
    return client, sessions


def _final(cluster: Cluster, sessions: Any, timeout_s: float = 90) -> SessionRow:
    def done() -> Any:
        with sessions() as s:
            row = s.execute(sa.select(SessionRow).where(SessionRow.agent_id == "P")).scalar_one_or_none()
            finished = row is not None and row.turns == 1 and row.pending is None and row.messages
            return row if finished else None
    return cluster.wait_for("the lead's turn to finish", done, timeout_s)


def _summary(row: SessionRow) -> str:
    return str(row.messages[-1]["content"][0]["text"])


def test_a_one_thread_worker_completes_a_parent_waiting_on_three_children_across_a_kill_9(
        tmp_path: Path, redis_srv: RedisServer, pg_url: str) -> None:
    """One worker of one thread runs the lead, its three children and the lead's resumed slice; it is
    killed (``kill -9``) in the middle of a child's model call and restarted: the redelivered turn
    re-runs the same io, each handle settles once, and no spend key or world is duplicated."""
    client, sessions = _start(pg_url, redis_srv, "topic 0; slow 1; topic 2")
    env = {"RSI_MODEL_FACTORY": FACTORY, "RSI_TASK_SOFT_TIME_LIMIT_S": "6", "RSI_TASK_TIME_LIMIT_S": "8",
           "RSI_VISIBILITY_TIMEOUT_S": "10", "RSI_RUNTIME__TURN_LEASE_S": "8"}
    r = redis.Redis.from_url(redis_srv.client_url)
    with AgentsCluster(tmp_path, pg_url, redis_srv.url, n=1, concurrency=1, env=env) as cluster:
        cluster.wait_for("the slow child to start", lambda: r.lindex(SLOW_KEY, 0), 60)
        cluster.kill(0)
        cluster.restart(0)
        row = _final(cluster, sessions, timeout_s=150)
    assert _summary(row) == "summary: finding on topic 0; finding on slow 1; finding on topic 2"
    assert r.llen(SLOW_KEY) == 2  # the killed attempt and its re-run
    with sessions() as s:
        handles = list(s.execute(sa.select(SubagentRow)).scalars())
        keys = list(s.execute(sa.select(SpendRow.key)).scalars())
        worlds = s.execute(sa.text("SELECT io_id FROM rsi_worlds")).scalars().all()
    assert sorted(h.status for h in handles) == ["completed"] * 3
    # operator message, spawns, child turns, 2 slices, and the killed attempt's reservation (lost:)
    assert len(keys) == len(set(keys)) == 1 + 3 + 3 + 2 + 1
    assert len([k for k in keys if k.startswith("lost:P.researcher:")]) == 1
    assert len(worlds) == len(set(worlds)) == 3 + 2
    assert r.llen(QUEUE_AGENTS) == 0 and r.zcard("rsi:tree:P:slots") == 0
    assert all(q == "consolidate" for q in {c.queue for c in client.dispatcher.calls})
    client.close()
