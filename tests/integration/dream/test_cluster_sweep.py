"""The Dream sweep fanned out as ``rsi.dream_episodes`` tasks on real Celery worker processes
(a real redis-server): untrusted code sandboxed inside the workers, a worker killed (-9) mid-sweep,
and the sweep's report identical to the inline one."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rsi_common.config import Settings
from rsi_common.db import make_engine, session_factory, upgrade
from rsi_common.db.dream import dream_episodes
from rsi_worker.cluster.app import create_app
from rsi_worker.cluster.dream_tasks import CeleryExecutor
from rsi_worker.dream.cycle import SqlEpisodeStore
from rsi_worker.dream.evaluate import EvalParams, InlineExecutor, sweep
from rsi_worker.dream.policies import PolicyCode, builtin
from rsi_worker.dream.simtasks import SimTaskParams, generate_worlds
from rsi_worker.local.servers import RedisServer
from tests.support.cluster import Cluster

# A model-written policy: parallel refine that also burns some CPU per decision, so episodes are in
# flight when the worker is killed (the burn changes no decision).
SLOW = builtin("parallel_refine").source.replace(
    "def choose(view, beta):\n", "def choose(view, beta):\n    _burn = sum(i * i for i in range(150000))\n"
)


def test_worker_killed_mid_sweep_resumes_with_identical_results(
    tmp_path: Path, redis_srv: RedisServer
) -> None:
    db_url = f"sqlite:///{tmp_path / 'rsi.db'}"
    engine = make_engine(db_url)
    upgrade(engine)
    sessions = session_factory(engine)
    worlds = generate_worlds(4, 4, SimTaskParams(branches=5, refine=2))
    untrusted = PolicyCode("model-written", SLOW)
    assert not untrusted.trusted and "_burn" in untrusted.source
    params = EvalParams(betas=(0.2, 0.6, 1.0))
    inline = sweep(untrusted, "s", worlds, params, InlineExecutor())
    env = {"RSI_VISIBILITY_TIMEOUT_S": "8", "RSI_TASK_TIME_LIMIT_S": "6", "RSI_TASK_SOFT_TIME_LIMIT_S": "5"}
    app = create_app(
        Settings(database_url=db_url, redis_url=redis_srv.url, model_backoff_s=0, home=tmp_path / "host")
    )
    out: dict[str, Any] = {}

    def run() -> None:
        executor = CeleryExecutor(app, sessions, "dc_kill", chunk=1, timeout_s=180)
        try:
            out["report"] = sweep(
                untrusted, "s", worlds, params, executor, SqlEpisodeStore(sessions, "dc_kill")
            )
        except BaseException as exc:
            out["error"] = exc

    with Cluster(tmp_path, db_url, redis_srv.url, n=2, concurrency=2, env=env) as cluster:
        thread = threading.Thread(target=run, daemon=True)
        thread.start()

        def stored() -> int:
            with sessions() as s:
                return len(dream_episodes(s, "dc_kill", "s"))

        cluster.wait_for("the first episodes to be stored", lambda: stored() >= 2)
        cluster.kill(0)  # kill -9 of a whole worker node with episodes in flight
        cluster.restart(0)
        thread.join(180)
        assert not thread.is_alive(), cluster.logs()
    engine.dispose()
    assert "error" not in out, out.get("error")
    assert out["report"] == inline
    assert stored() == len(worlds) * len(params.betas)
