"""Consolidation spend caps (docs/consolidation/spend.md), inline and on real workers."""

from __future__ import annotations

import time
from pathlib import Path

import redis

from rsi_common.config import ConsolidationParams, Settings
from rsi_common.db import replay_rows, runs
from rsi_worker.consolidate.spend import today
from rsi_worker.jobs.scenario import CORRECTION
from rsi_worker.local.servers import RedisServer
from tests.support.cluster import Cluster
from tests.support.pipeline import Stack

REQUEST = "Compare laptops: use search query=laptops"


def stack_with(tmp_path: Path, **caps: int) -> Stack:
    return Stack(
        Settings(
            database_url=f"sqlite:///{tmp_path / 'rsi.db'}",
            model_backoff_s=0,
            consolidation=ConsolidationParams(**caps),
        )
    )


def corrected(stack: Stack) -> None:
    stack.say("shop", "c1", REQUEST)
    stack.say("shop", "c1", CORRECTION)


def test_every_run_records_its_spend_and_the_counters_add_up(tmp_path: Path) -> None:
    stack = stack_with(tmp_path)
    corrected(stack)
    result = stack.consolidate("shop")
    assert result.status == "adopted"
    spend = result.summary()["spend"]
    role = sum(u["input_tokens"] + u["output_tokens"] for u in result.usage.values())
    assert spend["role_tokens"] == role > 0 and spend["replay_tokens"] > 0
    assert spend["tokens"] == role + spend["replay_tokens"]
    agent, cluster = stack.coord.spend("shop", today())
    assert agent == cluster == spend["tokens"]  # every token spent was counted, once
    stack.close()


def test_a_run_that_cannot_start_within_budget_is_skipped(tmp_path: Path) -> None:
    stack = stack_with(tmp_path, agent_daily_tokens=1000)
    corrected(stack)
    stack.coord.spend_add("shop", 1000, today())
    result = stack.consolidate("shop")
    assert result.status == "skipped" and result.reason.startswith("spend cap reached before the run")
    assert "agent spent 1000 of its 1000 tokens" in result.reason
    assert result.spend["capped"] and result.spend["agent"] == 1000 and result.usage == {}
    assert stack.state("shop").t == 0 and stack.current_version("shop") is None
    assert stack.coord.spend("shop", today()) == (1000, 1000)  # nothing more was spent
    stack.close()


def test_a_run_that_hits_the_cap_stops_cleanly(tmp_path: Path) -> None:
    """The signal reader's tokens reach the cap: trials make no model call, the run ends skipped."""
    stack = stack_with(tmp_path, agent_daily_tokens=1)
    corrected(stack)
    result = stack.consolidate("shop")
    assert result.status == "skipped" and result.reason.startswith("spend cap reached mid-run"), result.reason
    assert not result.adopted and stack.current_version("shop") is None and stack.state("shop").t == 0
    with stack.sessions() as s:
        rows = replay_rows(s, result.run_id)
    assert rows and all(r.status == "missing" and "spend cap" in r.result["error"] for r in rows)
    stack.close()


def test_the_cluster_cap_binds_every_agent(tmp_path: Path) -> None:
    stack = stack_with(tmp_path, agent_daily_tokens=0, cluster_daily_tokens=500)
    corrected(stack)
    stack.coord.spend_add("other-agent", 600, today())
    result = stack.consolidate("shop")
    assert result.status == "skipped" and "cluster spent 600 of its 500 tokens" in result.reason
    stack.close()


def test_caps_on_the_distributed_path(tmp_path: Path, redis_srv: RedisServer) -> None:
    db = f"sqlite:///{tmp_path / 'rsi.db'}"
    settings = Settings(
        database_url=db,
        redis_url=redis_srv.url,
        model_backoff_s=0,
        home=tmp_path / "h",
        consolidation=ConsolidationParams(agent_daily_tokens=1),
    )
    stack = Stack(settings, redis_client=redis.Redis.from_url(redis_srv.client_url))
    corrected(stack)
    env = {"RSI_CONSOLIDATION__AGENT_DAILY_TOKENS": "1"}
    with Cluster(tmp_path, db, redis_srv.url, n=1, env=env) as cluster:
        from rsi_common.dispatch import QUEUE_CONSOLIDATE, TASK_CONSOLIDATE, KombuDispatcher

        lease = stack.coord.try_begin("shop", stack.latest_io("shop"))
        assert lease is not None
        KombuDispatcher(redis_srv.url).enqueue(
            TASK_CONSOLIDATE, [lease.agent, lease.io, lease.token, lease.fence], QUEUE_CONSOLIDATE
        )
        (mid,) = cluster.finished("shop")
        # the run row is final before the lease is released: wait for the release, since a
        # try_begin during the run would mark the turn pending (and the settle would re-run it)
        r = redis.Redis.from_url(redis_srv.client_url)
        deadline = time.monotonic() + 30
        while r.exists("rsi:shop:lease") and time.monotonic() < deadline:
            time.sleep(0.05)
        lease = stack.coord.try_begin("shop", stack.latest_io("shop"))
        assert lease is not None
        KombuDispatcher(redis_srv.url).enqueue(
            TASK_CONSOLIDATE, [lease.agent, lease.io, lease.token, lease.fence], QUEUE_CONSOLIDATE
        )
        cluster.finished("shop", 2)
    with stack.sessions() as s:
        before = next(r for r in runs(s, "shop") if r.id != mid.id)
    assert mid.status == "skipped" and str(mid.reason).startswith("spend cap reached mid-run")
    assert before.status == "skipped" and str(before.reason).startswith("spend cap reached before the run")
    assert not redis.Redis.from_url(redis_srv.client_url).exists("rsi:shop:lease")
    stack.close()
