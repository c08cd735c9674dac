"""The Dream sweep fanned out as ``rsi.dream_episodes`` tasks on real Celery worker processes
(a real redis-server): identical to the inline sweep, untrusted code sandboxed inside the workers."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from rsi_common.config import Settings
from rsi_common.db import make_engine, session_factory, upgrade
from rsi_common.db.dream import DreamEpisodeRow, dream_episodes
from rsi_worker.cluster.app import create_app
from rsi_worker.cluster.dream_tasks import CeleryExecutor
from rsi_worker.dream.cycle import SqlEpisodeStore
from rsi_worker.dream.evaluate import EvalParams, InlineExecutor, sweep
from rsi_worker.dream.policies import PolicyCode, builtin
from rsi_worker.dream.simtasks import SimTaskParams, generate_worlds
from rsi_worker.local.servers import RedisServer
from tests.support.cluster import Cluster


def test_distributed_sweep_equals_inline_and_resumes(tmp_path: Path, redis_srv: RedisServer) -> None:
    db_url = f"sqlite:///{tmp_path / 'rsi.db'}"
    engine = make_engine(db_url)
    upgrade(engine)
    engine.dispose()
    worlds = generate_worlds(4, 4, SimTaskParams(branches=5, refine=2))
    untrusted = PolicyCode("model-written", "# written by a model\n" + builtin("parallel_refine").source)
    assert not untrusted.trusted
    params = EvalParams(betas=(0.2, 0.6, 1.0))
    inline = sweep(untrusted, "s", worlds, params, InlineExecutor())
    app = create_app(
        Settings(database_url=db_url, redis_url=redis_srv.url, model_backoff_s=0, home=tmp_path / "host")
    )
    with Cluster(tmp_path, db_url, redis_srv.url, n=2, concurrency=2):
        sessions = session_factory(make_engine(db_url))
        executor = CeleryExecutor(app, sessions, "dc_test", chunk=3, timeout_s=120)
        distributed = sweep(untrusted, "s", worlds, params, executor, SqlEpisodeStore(sessions, "dc_test"))
        assert distributed == inline
        # episodes lost (a worker killed before it stored them) are run again; the report is the same
        with sessions.begin() as s:
            s.execute(sa.delete(DreamEpisodeRow).where(DreamEpisodeRow.id % 2 == 0))
        again = sweep(untrusted, "s", worlds, params, executor, SqlEpisodeStore(sessions, "dc_test"))
        with sessions() as s:
            assert len(dream_episodes(s, "dc_test", "s")) == len(worlds) * len(params.betas)
    assert again == inline
