"""The record path's hand-off on kept connections (docs/performance/record-path.md#the-hand-off-on-the-wire,
#the-publish-on-a-kept-client): ``try_begin`` on the coordinator's wire answers and writes as
``Coordinator.try_begin``, survives a Redis restart without a lost trigger, and fakeredis keeps the
client's path; kombu's Redis channel puts the same bytes with one client per channel."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import fakeredis
import kombu
import pytest
import redis

from rsi_common.client import redis_client
from rsi_common.coord import Coordinator, Lease, fence_key, lease_key, pending_key
from rsi_common.coord_wire import try_begin, wire
from rsi_common.dispatch import (
    QUEUE_CONSOLIDATE,
    TASK_CONSOLIDATE,
    KombuDispatcher,
    RecordingDispatcher,
    celery_queue,
    kombu_url,
    task_message,
)
from rsi_common.handoff import trigger_consolidation
from rsi_common.kombu_channel import KeptClientChannel, KeptClientConnection
from rsi_worker.local.servers import RedisServer

pytestmark = pytest.mark.timeout(120)


def _state(r: redis.Redis, agent: str) -> tuple[object, ...]:
    return (r.exists(lease_key(agent)), r.get(pending_key(agent)), r.get(fence_key(agent)) is not None)


def test_try_begin_on_the_wire_answers_as_the_coordinator(redis_url: str) -> None:
    r = redis_client(redis_url)
    coord = Coordinator(r, lease_s=30)
    assert wire(r) is not None
    first = [try_begin(coord, "a", "io-1"), try_begin(coord, "a", "io-2"), try_begin(coord, "a", "io-3")]
    second = [coord.try_begin("b", "io-1"), coord.try_begin("b", "io-2"), coord.try_begin("b", "io-3")]
    assert first[0] is not None and second[0] is not None
    assert (first[0].io, first[0].agent, len(first[0].token)) == ("io-1", "a", 32)
    assert first[1:] == second[1:] == [None, None]  # pending: the newest io wins
    assert _state(r, "a") == _state(r, "b") == (1, b"io-3", True)
    assert r.pttl(lease_key("a")) > 0 and r.get(fence_key("a")) == str(first[0].fence).encode()
    # the run's finish hands the lease to the pending turn, whichever path marked it
    assert coord.finish(first[0]) is not None and coord.finish(second[0]) is not None
    r.close()


def test_a_flushed_script_cache_is_loaded_again(redis_url: str) -> None:
    r = redis_client(redis_url)
    coord = Coordinator(r, lease_s=30)
    assert try_begin(coord, "a", "io-1") is not None
    r.script_flush()
    r.delete(lease_key("a"))
    lease = try_begin(coord, "a", "io-2")  # NOSCRIPT → the client's Script loads it and sends it again
    assert lease is not None and lease.io == "io-2"
    r.close()


def test_fakeredis_keeps_the_clients_path() -> None:
    r = fakeredis.FakeRedis()
    coord = Coordinator(r, lease_s=30)
    assert wire(r) is None
    dispatcher = RecordingDispatcher()
    assert trigger_consolidation(coord, dispatcher, "a", "io-1").outcome == "enqueued"
    assert trigger_consolidation(coord, dispatcher, "a", "io-2").outcome == "pending"
    assert [t.args[:2] for t in dispatcher.tasks()] == [["a", "io-1"]]


def test_a_redis_restart_loses_no_trigger(tmp_path: Path) -> None:
    """The wire's kept connection is dead after a restart: the first trigger after it still takes
    the lease (the call is sent again through the client, which reconnects), never ``deferred``."""
    server = RedisServer(tmp_path / "redis").start()
    r = redis_client(server.client_url)
    coord = Coordinator(r, lease_s=30)
    dispatcher = RecordingDispatcher()
    try:
        assert trigger_consolidation(coord, dispatcher, "a", "io-1").outcome == "enqueued"
        server.stop()
        down = trigger_consolidation(coord, dispatcher, "b", "io-1")
        assert (down.outcome, down.error) == ("deferred", "ConnectionError")
        server.start()  # no persistence: every key and the script cache are gone
        assert trigger_consolidation(coord, dispatcher, "a", "io-2").outcome == "enqueued"
        server.stop()
        server.start()  # and with no failed call in between: the idle kept connection is dead
        assert trigger_consolidation(coord, dispatcher, "a", "io-3").outcome == "enqueued"
        assert [t.args[1] for t in dispatcher.tasks()] == ["io-1", "io-2", "io-3"]
    finally:
        r.close()
        server.stop()


def _put_bytes(conn: kombu.Connection, r: redis.Redis) -> bytes:
    message = task_message(TASK_CONSOLIDATE, ["a", "io-1", "tok", 7],
                           task_id="00000000-0000-4000-8000-000000000001")
    with conn:
        KombuDispatcher._publish(conn.Producer(), message, celery_queue(QUEUE_CONSOLIDATE))
    (raw,) = r.lrange(QUEUE_CONSOLIDATE, 0, -1)
    r.delete(QUEUE_CONSOLIDATE)
    tag = kombu.utils.json.loads(raw)["properties"]["delivery_tag"]
    assert isinstance(raw, bytes)
    return raw.replace(tag.encode(), b"<tag>")  # kombu's random delivery tag: the one difference


@pytest.mark.parametrize("unix_socket", [False, True])
def test_the_kept_client_channel_puts_the_same_bytes(tmp_path: Path, unix_socket: bool) -> None:
    server = RedisServer(tmp_path / "redis", unix_socket=unix_socket).start()
    r = redis.Redis.from_url(server.client_url)
    try:
        plain = _put_bytes(kombu.Connection(kombu_url(server.url)), r)
        kept_conn = KeptClientConnection(kombu_url(server.url))
        assert isinstance(kept_conn.default_channel, KeptClientChannel)
        assert _put_bytes(kept_conn, r) == plain
    finally:
        r.close()
        server.stop()


def test_the_dispatcher_makes_one_client_per_channel(redis_url: str) -> None:
    dispatcher = KombuDispatcher(redis_url, pool_limit=2)
    made = 0
    real_init = redis.Redis.__init__

    def counting_init(self: redis.Redis, *args: object, **kwargs: object) -> None:
        nonlocal made
        made += 1
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]

    try:
        with mock.patch.object(redis.Redis, "__init__", counting_init):
            ids = [dispatcher.enqueue(TASK_CONSOLIDATE, ["a", f"io-{i}", "t", i], QUEUE_CONSOLIDATE)
                   for i in range(20)]
        assert made <= 2  # the channel's kept client (+ its consumer-side client, unused): not 2 per put
        with redis.Redis.from_url(redis_url) as r:
            queued = [kombu.utils.json.loads(m)["headers"]["id"] for m in r.lrange(QUEUE_CONSOLIDATE, 0, -1)]
        assert sorted(queued) == sorted(ids)
    finally:
        dispatcher.close()


def test_a_coordinator_with_its_own_try_begin_keeps_it(redis_url: str) -> None:
    class Counting(Coordinator):
        calls = 0

        def try_begin(self, agent: str, io: str) -> Lease | None:
            Counting.calls += 1
            return super().try_begin(agent, io)

    r = redis_client(redis_url)
    coord = Counting(r, lease_s=30)
    assert trigger_consolidation(coord, RecordingDispatcher(), "a", "io-1").outcome == "enqueued"
    assert Counting.calls == 1
    r.close()
