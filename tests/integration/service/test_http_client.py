"""``RsiHttpClient`` against a live service: the host methods, the library's errors, ETag
revalidation, and harness changes delivered by the event stream — an adoption made by a real
Celery worker reaches a remote client without polling."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rsi_common.errors import AccessDenied, CredentialError, InvalidInput, UnknownAgentError, WorldError
from rsi_common.harness import H0_VERSION
from rsi_common.http_client import RsiHttpClient
from rsi_worker.local.servers import RedisServer
from tests.adversarial.credentials_support import POSITIVE
from tests.integration.client.conftest import make_world
from tests.integration.client.helpers import store_version, variant
from tests.integration.service.conftest import Live, start_live, stop_live
from tests.integration.service.learning import learn
from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(180)


def _client(live: Live, scope: str = "host", **kw: Any) -> RsiHttpClient:
    return RsiHttpClient(live.url, live.tokens[scope], backoff_s=0, **kw)


def test_record_turn_and_signals_over_http_answer_like_the_library(live: Live) -> None:
    with _client(live, listen=False) as c:
        rec = c.record_turn("h1", {"world": make_world("io-1")})
        assert rec.dispatched == "enqueued" and rec.seq == 1 and rec.world_id
        again = c.record_turn("h1", {"world": make_world("io-1")})
        assert again.world_id == rec.world_id  # idempotent per io_id: safe to retry
        assert c.record_signals("h1", "io-1", {"stars": 2}).world_id == rec.world_id
        with pytest.raises(WorldError, match="clock"):
            c.record_turn("h1", {"world": make_world("io-2", clock="soon")})
        with pytest.raises(CredentialError) as err:
            c.record_turn("h1", {"world": make_world("io-3", input=POSITIVE[0]["text"])})
        assert POSITIVE[0]["text"] not in str(err.value)
        with pytest.raises(UnknownAgentError):
            c.record_signals("nobody", "io-1", {"stars": 2})
        with pytest.raises(InvalidInput, match=r"signals\.stars"):
            c.record_signals("h1", "io-1", {"stars": 0})
    with (
        RsiHttpClient(live.url, live.tokens["viewer"], backoff_s=0, listen=False) as viewer,
        pytest.raises(AccessDenied, match="403"),
    ):
        viewer.record_turn("h1", {"world": make_world("io-4")})


def test_current_harness_is_cached_and_revalidated_with_the_etag(live: Live) -> None:
    with _client(live, listen=False, cache_ttl_s=0) as c:
        assert c.current_harness("h2").version == H0_VERSION
        assert c.current_harness("h2").version == H0_VERSION  # the second read is a 304
    metrics = live.http(live.tokens["viewer"]).get("/metrics").text
    assert 'route="/v1/agents/{agent_id}/harness",status="304"} 1.0' in metrics


def test_a_rollback_through_another_replica_reaches_the_client_by_the_stream(
    live: Live, sqlite_engine: Any, redis_url: str
) -> None:
    other = start_live(sqlite_engine, str(sqlite_engine.url), redis_url)  # a second replica
    try:
        host = live.http(live.tokens["host"])
        assert host.post("/v1/agents/h3/turns", json={"world": make_world("io-1")}).status_code == 200
        v = store_version(live.svc.sessions, "h3", variant("stream"))
        seen: list[dict[str, Any]] = []
        got = threading.Event()
        with _client(live, cache_ttl_s=600) as c:
            c.on_change = lambda e: (seen.append(e), got.set())
            assert c.start_listener(60)
            assert c.current_harness("h3").version == H0_VERSION  # cached for 10 minutes
            op = other.http(other.tokens["operator"])
            t0 = time.perf_counter()
            assert op.post("/v1/agents/h3/rollback", json={"version": v}).status_code == 200
            assert got.wait(30), "no harness event"
            print(
                "rollback via replica B -> event at a client of replica A: "
                f"{1000 * (time.perf_counter() - t0):.1f} ms"
            )
            assert seen[0]["agent_id"] == "h3" and seen[0]["version"] == v and seen[0]["change"] == "rollback"
            assert c.current_harness("h3").version == v  # only the stream could have dropped the entry
            got.clear()
            assert op.post("/v1/agents/h3/pin", json={"version": "h0"}).status_code == 200
            assert got.wait(30)
            assert seen[-1]["change"] == "pin" and seen[-1]["frozen"] is True
    finally:
        stop_live(other)


def test_an_adoption_by_a_real_worker_reaches_a_remote_client_without_polling(
    tmp_path: Path, sqlite_engine: Any, redis_srv: RedisServer
) -> None:
    live = start_live(sqlite_engine, str(sqlite_engine.url), redis_srv.url)
    cluster = Cluster(tmp_path, str(sqlite_engine.url), redis_srv.url, n=1).start()
    events: list[tuple[float, dict[str, Any]]] = []
    adopted = threading.Event()

    def on_change(e: dict[str, Any]) -> None:
        events.append((time.time(), e))
        if e["change"] == "adoption":
            adopted.set()

    try:
        with _client(live, cache_ttl_s=600) as c:
            c.on_change = on_change
            assert c.start_listener(60)
            learn(c, "shop")
            assert c.current_harness("shop").version == H0_VERSION  # cached from the turns
            runs = cluster.finished("shop", 1)
            assert adopted.wait(60), f"no adoption event; events: {events}\n{cluster.logs()}"
            run = next(r for r in runs if r.status == "adopted")
            at, event = next((t, e) for t, e in events if e["change"] == "adoption")
            assert event["version"] == run.adopted_version and event["adopted_by"] == run.id
            assert run.finished_at is not None
            print(
                "adoption committed -> event at the remote client: "
                f"{1000 * (at - run.finished_at.timestamp()):.0f} ms"
            )
            assert c.current_harness("shop").version == run.adopted_version
    finally:
        cluster.stop()
        stop_live(live)
