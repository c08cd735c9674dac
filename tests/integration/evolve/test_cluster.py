"""The evolve run on real Celery workers decides what ``--inline`` decides, through a kill -9 of a worker
mid-round: the sweeper gives the run a new chain and no trial is counted twice
(docs/algorithm/evolve.md#lease-and-recovery)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

import rsi_worker.roles  # noqa: F401 - registers the sim's role behaviours
from rsi_common.config import Settings
from rsi_common.coord import Coordinator
from rsi_common.db import make_engine, session_factory, upgrade
from rsi_common.dispatch import KombuDispatcher
from rsi_common.math import RRSIParams
from rsi_worker.bench.evolve_suite import sim_suite
from rsi_worker.cluster.evolve_watch import holder, launch
from rsi_worker.cluster.sweeper import sweep
from rsi_worker.consolidate import default_models
from rsi_worker.evolve.config import EvolveConfig
from rsi_worker.evolve.engine import EvolveEnv, run_inline
from rsi_worker.evolve.store import Store
from rsi_worker.local.servers import RedisServer
from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(240)
CONFIG = EvolveConfig(params=RRSIParams(T=1, k=2), trial_parallel=2, eval_parallel=2)
LEASE_S = 2


def _store(url: str) -> tuple[Any, Store, EvolveEnv]:
    settings = Settings(database_url=url, model_backoff_s=0)
    engine = make_engine(url)
    upgrade(engine)
    sessions = session_factory(engine)
    store = Store(sessions)
    store.save_suite(sim_suite("s", n_tasks=4, n_heldout=2))
    store.create("r", "s", CONFIG)
    return engine, store, EvolveEnv(sessions, default_models(settings), settings)


def _decisions(store: Store) -> list[Any]:
    out = []
    for r in store.rounds("r"):
        d = r["decision"] or {}
        if r["t"] >= 0:
            out.append(
                (
                    r["t"],
                    d["winner"],
                    d["delta"],
                    d["S_star"],
                    [
                        (c["variant"], c["decision"]["reason_code"], (c["ev"] or {}).get("S"))
                        for c in d["candidates"]
                    ],
                )
            )
    return out


def test_distributed_run_equals_inline_through_a_kill_9(tmp_path: Path, redis_srv: RedisServer) -> None:
    inline_engine, inline, inline_env = _store(f"sqlite:///{tmp_path / 'inline.db'}")
    assert run_inline(inline_env, "r").status == "done"
    url = f"sqlite:///{tmp_path / 'dist.db'}"
    dist_engine, dist, _ = _store(url)
    settings = Settings(database_url=url, redis_url=redis_srv.url, lease_s=LEASE_S)
    coord = Coordinator(redis.Redis.from_url(redis_srv.client_url), lease_s=LEASE_S)
    dispatcher = KombuDispatcher(redis_srv.url)
    env = {"RSI_LEASE_S": str(LEASE_S), "RSI_SIM_LATENCY_MS": "150"}
    swept: list[int] = []
    last = [0.0]

    def beat() -> None:
        if time.monotonic() - last[0] > 0.5:  # the beat's sweeper, every half second
            last[0] = time.monotonic()
            swept.append(sweep(dist.sessions, coord, dispatcher, settings).evolve_resumed)

    def round_trials() -> bool:
        if dist.trials("r"):  # the workers are up (the lease is short for their start)
            beat()
        return any(r["t"] == 0 and r["candidate"] in "AB" for r in dist.trials("r"))

    def ended() -> bool:
        beat()
        return dist.run("r")[2] != "running"

    with Cluster(tmp_path, url, redis_srv.url, n=2, concurrency=4, env=env) as cluster:
        dist.set_run("r", status="running")
        first = launch(coord, dispatcher, "r")
        assert first is not None
        cluster.wait_for("round 0's candidate trials", round_trials, timeout_s=120)
        before = sum(swept)
        cluster.kill(0)  # kill -9 of whole worker nodes: their trials and steps are never acknowledged
        cluster.kill(1)  # (both: so that work is surely lost, whichever worker held it)
        cluster.restart(0)
        cluster.wait_for("the evolve run to end", ended, timeout_s=150)
    assert dist.run("r")[2] == "done"
    assert sum(swept) > before  # the chain died with the worker and the sweeper gave it a new one
    assert _decisions(dist) == _decisions(inline) and _decisions(dist)
    keys = [(r["t"], r["candidate"], r["world_id"], r["trial"], r["attempt"]) for r in dist.trials("r")]
    assert len(keys) == len(set(keys)) == len(inline.trials("r"))  # no trial counted twice
    state: dict[str, Any] = dist.run("r")[4] or {}
    local: dict[str, Any] = inline.run("r")[4] or {}
    assert state["heldout"] == local["heldout"] and state["trajectory"] == local["trajectory"]
    assert coord.lease_holder(holder("r")) is None  # the chain that ended released its lease
    inline_engine.dispose()
    dist_engine.dispose()
