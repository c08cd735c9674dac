"""Class 3 of issue 11 on real Celery worker processes and a real redis-server: a poison row written
with raw SQL (SQLite and PostgreSQL) and a step that raises leave no lease, no pending mark and no
stalled agent behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from rsi_common.config import Settings
from rsi_common.coord import fence_key
from rsi_common.db import AgentRow
from rsi_common.dispatch import QUEUE_CONSOLIDATE, TASK_CONSOLIDATE, KombuDispatcher
from rsi_worker.local.servers import RedisServer
from tests.adversarial.stranding import LONE, agent_keys, escaped, run_keys, write_json
from tests.adversarial.stranding_factories import armed_key
from tests.adversarial.test_stranding import A, scenario
from tests.support.cluster import Cluster
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(240)
GOOD = "Compare headphones: use search query=headphones"


def stack_for(tmp_path: Path, db_url: str, server: RedisServer) -> Stack:
    settings = Settings(database_url=db_url, redis_url=server.url, model_backoff_s=0, home=tmp_path / "x")
    return Stack(settings, redis_client=redis.Redis.from_url(server.client_url))


def trigger(stack: Stack, io: str, server: RedisServer, pending: str | None = None) -> int:
    """Take the lease for ``io`` and enqueue its run; then ``pending`` arrives while it is held."""
    lease = stack.coord.try_begin(A, io)
    assert lease is not None
    KombuDispatcher(server.url).enqueue(TASK_CONSOLIDATE, [lease.agent, lease.io, lease.token, lease.fence],
                                        QUEUE_CONSOLIDATE)
    if pending is not None:
        assert stack.coord.try_begin(A, pending) is None
    return lease.fence


def clean(server: RedisServer) -> tuple[set[str], set[str]]:
    client = redis.Redis.from_url(server.client_url)
    try:
        return agent_keys(client, A), run_keys(client)
    finally:
        client.close()


def wait_clean(cluster: Cluster, server: RedisServer) -> None:
    """Wait until only the agent's fence is left in Redis. A run's row is written before its lease
    is released (never the other way round, or another run could start first), so a test that saw
    the row finished while the workers run must wait for the release."""
    cluster.wait_for("the last run's lease to be released",
                     lambda: clean(server) == ({fence_key(A)}, set()))


def test_a_poison_row_on_real_workers_is_skipped_and_the_agent_goes_on(
    tmp_path: Path, redis_srv: RedisServer, db_url: str
) -> None:
    stack = stack_for(tmp_path, db_url, redis_srv)
    ok = stack.say(A, "ok", GOOD, signals={"stars": 5})
    wid = stack.world_id(A, ok)
    io, later = scenario(stack)
    write_json(stack.engine, "signals", wid, escaped({"stars": 5, "comment": f"bad {LONE}"}))
    trigger(stack, io, redis_srv, pending=later)
    with Cluster(tmp_path, db_url, redis_srv.url, n=2) as cluster:
        first, rerun = cluster.finished(A, n=2)
        assert first.status == "adopted", (first.reason, first.error)
        reason = (first.result or {})["skipped_worlds"][wid]
        assert reason.startswith("signals.comment: lone surrogate U+D800") and "bad" not in reason
        assert (rerun.io_id, rerun.status) == (later, "recorded")
        wait_clean(cluster, redis_srv)
        nxt = stack.say(A, "c3", GOOD, signals={"stars": 5})  # the agent's next good turn
        trigger(stack, str(nxt.world["io_id"]), redis_srv)  # type: ignore[index]
        runs = cluster.finished(A, n=3)
    assert runs[-1].status == "recorded" and wid in (runs[-1].result or {})["skipped_worlds"]
    assert clean(redis_srv) == ({fence_key(A)}, set())
    stack.close()


@pytest.mark.parametrize("step", ["open_run", "after_incumbent", "judge_round"])
def test_a_step_that_raises_on_a_worker_fails_the_run_and_reruns_the_pending_turn_once(
    tmp_path: Path, redis_srv: RedisServer, step: str
) -> None:
    """``open_run`` is the ``consolidate`` task; the others are chord bodies on the judge queue."""
    db_url = f"sqlite:///{tmp_path / 'rsi.db'}"
    stack = stack_for(tmp_path, db_url, redis_srv)
    io, later = scenario(stack)
    redis.Redis.from_url(redis_srv.client_url).set(armed_key(step), "1")
    fence = trigger(stack, io, redis_srv, pending=later)
    env = {"RSI_MODEL_FACTORY": f"tests.adversarial.stranding_factories:{step}_fails_once"}
    with Cluster(tmp_path, db_url, redis_srv.url, n=2, env=env) as cluster:
        failed, rerun = cluster.finished(A, n=2)
    assert (failed.io_id, failed.fence, failed.status) == (io, fence, "failed")
    assert failed.reason == "the run failed: RuntimeError"
    assert failed.error == {"type": "RuntimeError", "message": f"injected failure of {step}"}
    assert (rerun.io_id, rerun.status) == (later, "adopted")  # exactly one re-run; it learned
    assert clean(redis_srv) == ({fence_key(A)}, set())
    assert not redis.Redis.from_url(redis_srv.client_url).exists(armed_key(step))
    stack.close()


def test_a_consolidate_task_that_raises_on_a_worker_never_strands_the_agent(
    tmp_path: Path, redis_srv: RedisServer, db_url: str
) -> None:
    """A stored state no run can read fails ``open_run`` (the ``consolidate`` task) of every run:
    each is recorded ``failed`` with its lease released, the pending turn runs exactly once, and
    once the state is repaired the agent's next turn consolidates normally."""
    stack = stack_for(tmp_path, db_url, redis_srv)
    io, later = scenario(stack)
    with stack.engine.begin() as conn:
        conn.execute(sa.update(AgentRow).where(AgentRow.id == A).values(state={"schema": "rsi-state/99"}))
    fence = trigger(stack, io, redis_srv, pending=later)
    with Cluster(tmp_path, db_url, redis_srv.url, n=2) as cluster:
        failed, rerun = cluster.finished(A, n=2)
        assert (failed.io_id, failed.fence, failed.status) == (io, fence, "failed")
        assert failed.error == {"type": "StoredDataError", "message": "state.schema: unknown consolidation "
                                "state format 'rsi-state/99' (this code reads rsi-consolidation-state/1)"}
        assert (rerun.io_id, rerun.status) == (later, "failed")
        assert rerun.reason == "the run failed: StoredDataError"
        wait_clean(cluster, redis_srv)
        with stack.engine.begin() as conn:
            conn.execute(sa.update(AgentRow).where(AgentRow.id == A).values(state={}))
        nxt = stack.say(A, "c3", GOOD, signals={"stars": 5})
        trigger(stack, str(nxt.world["io_id"]), redis_srv)  # type: ignore[index]
        runs = cluster.finished(A, n=3)
    assert len(runs) == 3 and runs[-1].status == "adopted", (runs[-1].reason, runs[-1].error)
    assert clean(redis_srv) == ({fence_key(A)}, set())
    stack.close()
