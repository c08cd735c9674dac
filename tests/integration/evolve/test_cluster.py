"""The evolve run on real Celery workers decides what ``--inline`` decides (docs/algorithm/evolve.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import rsi_worker.roles  # noqa: F401 - registers the sim's role behaviours
from rsi_common.config import Settings
from rsi_common.db import make_engine, session_factory, upgrade
from rsi_common.dispatch import TASK_EVOLVE_STEP, TASK_QUEUES, KombuDispatcher
from rsi_common.math import RRSIParams
from rsi_worker.bench.evolve_suite import sim_suite
from rsi_worker.consolidate import default_models
from rsi_worker.evolve.config import EvolveConfig
from rsi_worker.evolve.engine import EvolveEnv, run_inline
from rsi_worker.evolve.store import Store
from rsi_worker.local.servers import RedisServer
from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(240)
CONFIG = EvolveConfig(params=RRSIParams(T=1, k=2), trial_parallel=2, eval_parallel=2)


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


def test_distributed_run_equals_inline(tmp_path: Path, redis_srv: RedisServer) -> None:
    inline_engine, inline, inline_env = _store(f"sqlite:///{tmp_path / 'inline.db'}")
    assert run_inline(inline_env, "r").status == "done"
    url = f"sqlite:///{tmp_path / 'dist.db'}"
    dist_engine, dist, _ = _store(url)
    with Cluster(tmp_path, url, redis_srv.url, n=2, concurrency=4) as cluster:
        dist.set_run("r", status="running")
        KombuDispatcher(redis_srv.url).enqueue(TASK_EVOLVE_STEP, [[], "r"], TASK_QUEUES[TASK_EVOLVE_STEP])
        cluster.wait_for("the evolve run to end", lambda: dist.run("r")[2] != "running", timeout_s=180)
    assert dist.run("r")[2] == "done"
    assert _decisions(dist) == _decisions(inline) and _decisions(dist)
    keys = [(r["t"], r["candidate"], r["world_id"], r["trial"], r["attempt"]) for r in dist.trials("r")]
    assert len(keys) == len(set(keys)) == len(inline.trials("r"))
    state, local = dist.run("r")[4] or {}, inline.run("r")[4] or {}
    assert state["heldout"] == local["heldout"] and state["trajectory"] == local["trajectory"]
    inline_engine.dispose()
    dist_engine.dispose()
