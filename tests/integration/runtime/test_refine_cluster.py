"""A refine run on real Celery worker processes and a real redis-server (docs/runtime/refine.md#run):
the ``consolidate`` task starts it from its lease io, and a refine that waits for a busy lease is
handed the lease by the running run's ``finish``, ahead of the pending turn."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from rsi_common.config import Settings
from rsi_common.coord import pending_refine_key
from rsi_common.dispatch import KombuDispatcher
from rsi_common.runtime.refine import check_request, schedule_refine
from rsi_worker.jobs.scenario import CORRECTION
from rsi_worker.local.servers import RedisServer
from tests.support.cluster import Cluster
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(240)
LAPTOPS = "Compare laptops: use search query=laptops"


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)  # the deployment database only: one run
def test_a_waiting_refine_runs_on_the_cluster_after_the_running_consolidation(
        tmp_path: Path, redis_srv: RedisServer, db_url: str) -> None:
    settings = Settings(database_url=db_url, redis_url=redis_srv.url, model_backoff_s=0, home=tmp_path / "h")
    client = redis.Redis.from_url(redis_srv.client_url)
    stack = Stack(settings, redis_client=client)
    try:
        stack.say("shop", "c1", LAPTOPS)
        io = str(stack.say("shop", "c1", CORRECTION).world["io_id"])
        dispatcher = KombuDispatcher(redis_srv.url)
        held = stack.coord.try_begin("shop", io)  # the turn's consolidation holds the lease
        assert held is not None
        req = check_request("tables for comparisons", ["present options as a table"], "ops")
        waiting = schedule_refine(stack.sessions, stack.coord, dispatcher, "shop", req)
        assert waiting.reason == "waiting for the running consolidation"
        assert client.get(pending_refine_key("shop")) == req.io.encode()
        from rsi_common.handoff import enqueue_lease

        enqueue_lease(stack.coord, dispatcher, held)
        with Cluster(tmp_path, db_url, redis_srv.url, n=1) as cluster:
            runs = cluster.finished("shop", n=2)
    finally:
        stack.close()
    by_kind = {r.kind: r for r in runs}
    assert set(by_kind) == {"consolidate", "refine"}, [(r.kind, r.status) for r in runs]
    first, refine = by_kind["consolidate"], by_kind["refine"]
    assert first.status == "adopted", first.reason
    assert refine.io_id == req.io and refine.fence > first.fence
    assert (refine.params or {})["refine"]["criteria"] == ["present options as a table"]
    assert refine.status == "kept", refine.reason  # the adopted harness already makes tables
    assert client.get(pending_refine_key("shop")) is None
