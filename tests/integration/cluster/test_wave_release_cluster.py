"""The second wave on the cluster (rsi_worker/cluster/wave_release.py): with free threads a hopeless
candidate makes exactly its first wave's model calls; the rest of its plan is sent after the first
wave is counted, once, and stores ``cancelled`` without a model call."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from rsi_common.config import Settings
from rsi_common.coord import Bounds
from rsi_common.db import replay_rows
from rsi_common.dispatch import QUEUE_CONSOLIDATE, TASK_CONSOLIDATE, KombuDispatcher
from rsi_worker.cluster.wave_release import release_key
from rsi_worker.consolidate.context import RoundContext
from rsi_worker.consolidate.evaluate import TrialSlot, bound_total
from rsi_worker.consolidate.waves import first_wave
from rsi_worker.jobs.scenario import CORRECTION
from rsi_worker.local.servers import RedisServer
from tests.support.cluster import Cluster
from tests.support.factories import CALLS_KEY
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(240)
REQUEST = "Compare laptops: use search query=laptops"


def test_a_hopeless_candidate_runs_only_its_first_wave_on_free_threads(tmp_path: Path,
                                                                        redis_srv: RedisServer) -> None:
    db_url = f"sqlite:///{tmp_path / 'rsi.db'}"
    settings = Settings(database_url=db_url, redis_url=redis_srv.url, model_backoff_s=0, home=tmp_path / "x")
    stack = Stack(settings, redis_client=redis.Redis.from_url(redis_srv.client_url))
    for i in range(6):
        stack.say("shop", f"ok{i}", "Compare headphones: use search query=headphones", signals={"stars": 5})
    for i in range(2):
        stack.say("shop", f"bad{i}", REQUEST)
        stack.say("shop", f"bad{i}", CORRECTION)
    # a model call (600 ms) outlasts the gate's first look (0.5 s after the launch): the gate is resent
    # at least once before the first wave releases; its bound (600 s) never comes first, at any load
    env = {"RSI_MODEL_FACTORY": "tests.support.factories:hopeless", "RSI_SIM_LATENCY_MS": "600",
           "RSI_CONSOLIDATION__EARLY_STOP_WAVE_S": "600"}
    with Cluster(tmp_path, db_url, redis_srv.url, n=2, concurrency=8, env=env) as cluster:
        lease = stack.coord.try_begin("shop", stack.latest_io("shop"))
        assert lease is not None
        args = [lease.agent, lease.io, lease.token, lease.fence]
        KombuDispatcher(redis_srv.url).enqueue(TASK_CONSOLIDATE, args, QUEUE_CONSOLIDATE)
        (run,) = cluster.finished("shop")
        broker = redis.Redis.from_url(redis_srv.client_url)
        # every chord joined: the inner chords counted their gates' successors and the added second
        # waves exactly (a chord whose size is never reached keeps its ``.s`` key)
        cluster.wait_for("every chord to join", lambda: not broker.keys("celery-taskset-meta-*.s"))
    assert run.status == "adopted", (run.reason, run.error)
    b = next(c for c in (run.result or {})["round"]["candidates"] if c["variant"] == "B")
    assert b["early_stopped"] and b["outcome"] == "REJECTED" and b["reason_code"] == "floor"
    ctx = RoundContext.from_json(run.params or {})
    plan = [TrialSlot.from_json(s) for s in ctx.slots["B"]]
    rnd, k = ctx.round.set_up(), stack.settings.consolidation.k
    start = Bounds(0, 0, bound_total(ctx.worlds, ctx.checks, k), rnd.S_star, rnd.delta, rnd.S_t)
    wave = first_wave(plan, ctx.checks, start, 1e-9)
    assert 0 < wave < len(plan)
    with stack.sessions() as s:
        rows = {(r.world_id, r.trial): r for r in replay_rows(s, run.id, "B")}
    assert len(rows) == len(plan)  # the judge counted the whole plan, second wave included
    ran = [p for p in plan if "replay" in (rows[(p.world_id, p.trial)].result or {})]
    assert ran and set(ran) <= set(plan[:wave])  # the second wave was sent after the first counted
    assert all(rows[(p.world_id, p.trial)].status == "cancelled" for p in plan[wave:])
    calls = int(redis.Redis.from_url(redis_srv.client_url).get(CALLS_KEY) or 0)
    steps = sum(int(((r.result or {}).get("replay") or {}).get("steps") or 0) for r in rows.values())
    assert calls == steps <= wave  # at most one refusal per first-wave trial: the ceiling
    client, deadline = redis.Redis.from_url(redis_srv.client_url), time.monotonic() + 60
    while client.exists(release_key(run.id, "B")) and time.monotonic() < deadline:
        time.sleep(0.05)  # a gate's last look may hold its claim for an instant, then drops it
    assert not client.exists(release_key(run.id, "B"))  # the claim went with the run's keys at its close
    stack.close()
