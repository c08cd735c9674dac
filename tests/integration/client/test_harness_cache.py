"""``current_harness``: per-process cache, pub/sub invalidation across processes, the TTL path,
the admin pin, and a turn's harness frozen for the whole turn (docs/algorithm/consolidation.md §3.12.9,
docs/formats.md §5.4; invariant 1)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.client import RsiClient, redis_client
from rsi_common.config import Settings
from rsi_common.harness import H0_VERSION
from rsi_common.kernel import TurnPlan
from rsi_common.kernel.testing import ScriptedModel, text_response
from rsi_common.llm import ModelRequest, ModelResponse
from rsi_worker.local.servers import RedisServer
from tests.integration.client.helpers import closed_url, store_version, variant

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]


def _until(predicate: Callable[[], bool], timeout_s: float) -> float:
    """Poll ``predicate`` every millisecond; return the seconds it took (fails on timeout)."""
    start = time.perf_counter()
    while not predicate():
        assert time.perf_counter() - start < timeout_s, "condition not reached in time"
        time.sleep(0.001)
    return time.perf_counter() - start


def _adopt(client: RsiClient, sessions: sessionmaker[Session], agent: str, harness: Any) -> None:
    """What a consolidation's final write does: fenced adoption, then the invalidation."""
    lease = client.coord.try_begin(agent, "io-adopt")
    assert lease is not None
    with sessions.begin() as s:
        run = db.start_run(s, agent, fence=lease.fence, io_id="io-adopt")
        db.final_write(s, run.id, status="adopted", state={},
                       adoption=db.Adoption(harness.version, harness.payload()))
    client.coord.publish_harness_change(agent)
    client.coord.finish(lease)


class _Lines:
    """Reads a child's stdout lines on a thread, so reads can have deadlines."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._q: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        out = proc.stdout

        def pump() -> None:
            for line in out:
                self._q.put(line)

        threading.Thread(target=pump, daemon=True).start()

    def next(self, timeout_s: float) -> dict[str, Any]:
        return dict(json.loads(self._q.get(timeout=timeout_s)))


def test_a_change_published_in_one_process_is_seen_by_another(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session], db_url: str, redis_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    writer = make_client()
    v1 = variant("adopted")
    with sessions.begin() as s:
        db.ensure_agent(s, "a1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.harness_watcher", db_url, redis_url, "a1",
         f"{v1.version},{H0_VERSION}", "60"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True,
    )
    try:
        lines = _Lines(proc)
        ready = lines.next(60)
        assert ready == {"event": "ready", "version": H0_VERSION, "subscribed": True}
        latencies = {}
        for label, change, expected in (
            ("adoption", lambda: _adopt(writer, sessions, "a1", v1), v1.version),
            ("rollback", lambda: writer.rollback("a1", None), H0_VERSION),
        ):
            t0 = time.time()
            change()
            seen = lines.next(60)
            assert seen["event"] == "seen" and seen["version"] == expected
            latencies[label] = (seen["t"] - t0) * 1000
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with capsys.disabled():
        print("\n[harness invalidation across processes] adoption seen after "
              f"{latencies['adoption']:.1f} ms, rollback after {latencies['rollback']:.1f} ms "
              "(cache TTL 15 s; a figure, not an assertion: rsi bench api measures it)")


def test_without_pubsub_the_cache_holds_until_then_a_publish_drops_it(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session], rclient: redis.Redis
) -> None:
    reader = make_client()
    reader._cache._clock = lambda: 0.0  # the TTL never runs out: only the publish can drop the entry
    assert reader.start_listener(wait_s=60)
    v1 = store_version(sessions, "a1", variant("1"))
    assert reader.current_harness("a1").version == H0_VERSION
    with sessions.begin() as s:  # moved behind the cache's back: no publish
        db.rollback_to(s, "a1", v1)
    assert reader.current_harness("a1").version == H0_VERSION
    reader.coord.publish_harness_change("a1")
    _until(lambda: reader.current_harness("a1").version == v1, 60.0)


def test_without_redis_the_ttl_refreshes_the_harness(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session]
) -> None:
    assert Settings().harness_cache_ttl_s == 15.0  # the default stays 15 s
    dead = redis_client(closed_url())
    try:
        writer = make_client()
        reader = make_client(redis=dead, overrides={"harness_cache_ttl_s": 0.3})
        now = [0.0]
        reader._cache._clock = lambda: now[0]  # the TTL's clock: only the test moves it, so a slow
        # database write below cannot expire the entry before the "still cached" read
        assert not reader.start_listener(wait_s=0.2)  # no Redis: never subscribed, the wait runs out
        v1 = store_version(sessions, "a1", variant("1"))
        assert reader.current_harness("a1").version == H0_VERSION
        writer.rollback("a1", v1)
        now[0] = 0.29
        assert reader.current_harness("a1").version == H0_VERSION  # cached, nobody told it
        now[0] = 0.3
        assert reader.current_harness("a1").version == v1  # the TTL (0.3 s) expired
        reader.rollback("a1", None)  # publishing fails: logged, the local entry is dropped anyway
        assert reader.current_harness("a1").version == H0_VERSION
    finally:
        dead.close()


def test_listener_resubscribes_after_a_redis_restart(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "redis").start()
    own = redis_client(server.client_url)
    try:
        reader = make_client(redis=own)
        reader._cache._clock = lambda: 0.0  # the TTL never runs out: only the reset drops the entry
        writer = make_client()
        assert reader.start_listener(wait_s=60)
        v1 = store_version(sessions, "a1", variant("1"))
        assert reader.current_harness("a1").version == H0_VERSION
        server.restart()
        writer.rollback("a1", v1)  # published on another Redis: the reader can only see it by resetting
        _until(lambda: reader.current_harness("a1").version == v1, 60.0)
        assert reader.start_listener(wait_s=60)
    finally:
        own.close()
        server.stop()


def test_admin_pin_wins_and_unknown_agents_get_h0(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session]
) -> None:
    v1 = store_version(sessions, "a1", variant("1"))
    client = make_client()
    client.rollback("a1", v1)
    assert client.current_harness("a1").version == v1
    assert client.current_harness("never-seen").version == H0_VERSION
    pinned = make_client(overrides={"harness_dir": "builtin:h0"})
    assert pinned.current_harness("a1").version == H0_VERSION
    result = pinned.run_turn("a1", TurnPlan(input="hi", io_id="io1"), ScriptedModel([text_response("ok")]))
    assert result.trajectory["lineage"] == "fixed"


def test_a_turn_keeps_its_harness_when_a_rollback_lands_mid_turn(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session]
) -> None:
    client = make_client()
    admin = make_client()
    assert client.start_listener(wait_s=60)
    v1 = store_version(sessions, "a1", variant("1"))

    def mid_turn(request: ModelRequest) -> ModelResponse:
        admin.rollback("a1", v1)
        _until(lambda: client.current_harness("a1").version == v1, 60.0)  # the host already sees it
        return text_response("first")

    plan = TurnPlan(input="hello", io_id="io1", provider="scripted", model="scripted-1")
    first = client.run_turn("a1", plan, ScriptedModel([mid_turn]))
    assert first.world is not None and first.world["harness_version"] == H0_VERSION
    assert first.trajectory["lineage"] == "h0"
    second = client.run_turn("a1", TurnPlan(input="again", io_id="io2"),
                             ScriptedModel([text_response("2nd")]))
    assert second.world is not None and second.world["harness_version"] == v1
    assert second.trajectory["lineage"] == "agent"
    with sessions() as s:
        stored = {w.io_id: w.harness_version for w in db.load_latest_worlds(s, "a1", 10)}
    assert stored == {"io1": H0_VERSION, "io2": v1}
