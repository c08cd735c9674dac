"""The per-turn ``try_begin`` script without redis-py's command path
(:class:`rsi_common.lean_redis.LeanScript`, docs/performance/record-path.md#the-lean-evalsha): the
same replies as redis-py's ``Script``, a flushed script cache reloaded, a stopped server raised as
redis-py raises it and reconnected after, one connection per thread, closed by ``close`` or, for a
finished thread, when it is collected."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fakeredis
import pytest
import redis

from rsi_common.client import redis_client
from rsi_common.coord import Coordinator, fence_key, pending_key
from rsi_common.handoff import COORD_ERRORS
from rsi_common.lean_redis import LeanScript
from rsi_worker.local.servers import RedisServer


def test_lean_and_redis_py_scripts_answer_alike(redis_url: str) -> None:
    client = redis_client(redis_url)
    lean = Coordinator(client, lease_s=60)
    plain = Coordinator(client, lease_s=60)
    plain._try_begin = lean._try_begin.script  # type: ignore[assignment]  # redis-py's Script itself
    assert isinstance(lean._try_begin, LeanScript) and lean._try_begin._pool is not None
    got, fences = [], []
    for i in range(6):
        coord = lean if i % 2 else plain
        for agent in ("a", "b"):
            lease = coord.try_begin(agent + str(i // 4), f"io{i}")
            got.append(None if lease is None else (lease.agent, lease.io))
            fences.append(0 if lease is None else lease.fence)
    assert got == [("a0", "io0"), ("b0", "io0"), None, None, None, None,
                   None, None, ("a1", "io4"), ("b1", "io4"), None, None]
    assert client.get(pending_key("a0")) == b"io3" and client.get(fence_key("a1")) == str(fences[8]).encode()
    assert all(f > 0 for f in fences[:2] + fences[8:10])
    lean.close()
    client.close()


def test_fakeredis_keeps_the_redis_py_path() -> None:
    coord = Coordinator(fakeredis.FakeRedis(server=fakeredis.FakeServer()), lease_s=60)
    assert coord._try_begin._pool is None
    lease = coord.try_begin("a", "io1")
    assert lease is not None and lease.fence > 0 and coord.try_begin("a", "io2") is None


def test_a_flushed_script_cache_is_reloaded(redis_url: str) -> None:
    client = redis_client(redis_url)
    coord = Coordinator(client, lease_s=60)
    assert coord.try_begin("a", "io1") is not None
    client.script_flush()
    assert coord.try_begin("b", "io1") is not None  # NOSCRIPT: loaded through redis-py, then run
    assert client.script_exists(coord._try_begin.script.sha) == [True]
    assert coord.try_begin("c", "io1") is not None
    coord.close()
    client.close()


def test_a_stopped_server_raises_a_coordination_error_and_reconnects(redis_srv: RedisServer) -> None:
    client = redis_client(redis_srv.url)
    coord = Coordinator(client, lease_s=60)
    assert coord.try_begin("a", "io1") is not None
    redis_srv.stop()
    with pytest.raises(COORD_ERRORS) as err:
        coord.try_begin("a", "io2")
    assert isinstance(err.value, redis.ConnectionError)
    redis_srv.start()
    lease = coord.try_begin("b", "io1")  # the thread's connection was dropped; the next call reconnects
    assert lease is not None and lease.fence > 0
    coord.close()
    client.close()


def test_one_connection_per_thread_closed_by_close(redis_url: str) -> None:
    client = redis_client(redis_url)
    coord = Coordinator(client, lease_s=60)
    lean = coord._try_begin
    barrier = threading.Barrier(4)

    def turns(t: int) -> tuple[list[bool], Any]:
        barrier.wait()
        took = [coord.try_begin(f"t{t}-{i % 3}", f"io{i}") is not None for i in range(9)]
        return took, lean._local.conn

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(turns, range(4)))
    assert [took for took, _ in results] == [[True] * 3 + [False] * 6] * 4
    made = [conn for _, conn in results]  # held here: the threads have ended
    assert len({id(c) for c in made}) == 4 and all(c._sock is not None for c in made)
    assert set(lean._made) == set(made)
    coord.close()
    assert all(conn._sock is None for conn in made)
    assert coord.try_begin("after", "io1") is not None  # reconnects after close
    coord.close()
    client.close()


def test_a_finished_threads_connection_is_collected(redis_url: str) -> None:
    client = redis_client(redis_url)
    coord = Coordinator(client, lease_s=60)
    refs: list[weakref.ref[Any]] = []

    def turn() -> None:
        assert coord.try_begin("a", "io1") is not None
        refs.append(weakref.ref(coord._try_begin._local.conn))

    thread = threading.Thread(target=turn)
    thread.start()
    thread.join()
    gc.collect()
    assert refs and refs[0]() is None and len(coord._try_begin._made) == 0  # no socket kept for it
    client.close()
