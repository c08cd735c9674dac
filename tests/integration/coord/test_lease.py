"""Leases, pending marks and fences (docs/protocol.md#redis-key-protocol,
docs/algorithm/consolidation.md §3.12.2-3)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import redis

from rsi_common.coord import (
    HARNESS_CHANNEL,
    Coordinator,
    Lease,
    LeaseHolder,
    fence_key,
    lease_key,
    pending_key,
)
from tests.integration.coord._workers import race_try_begin
from tests.integration.coord.conftest import run_keys


def test_try_begin_takes_the_lease_or_sets_pending(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    lease = coord.try_begin("a1", "io1")
    assert lease is not None and (lease.agent, lease.io) == ("a1", "io1")
    assert redis_client.get(lease_key("a1")) == lease.token.encode()
    assert 59_000 < redis_client.pttl(lease_key("a1")) <= 60_000
    assert coord.lease_holder("a1") == LeaseHolder(lease.token, lease.fence)
    assert coord.try_begin("a1", "io2") is None
    assert coord.try_begin("a1", "io3") is None
    assert coord.pending("a1") == "io3"
    assert redis_client.pttl(pending_key("a1")) == -1  # no TTL while the run goes
    assert run_keys(redis_client) == ["rsi:a1:fence", "rsi:a1:lease", "rsi:a1:pending"]
    other = coord.try_begin("a2", "io1")
    assert other is not None and other.token != lease.token


def test_finish_hands_the_newest_pending_io_out_exactly_once(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    first = coord.try_begin("a1", "io1")
    assert first is not None
    for io in ("io2", "io3", "io4"):
        assert coord.try_begin("a1", io) is None
    rerun = coord.finish(first)
    assert rerun is not None and rerun.io == "io4"
    assert rerun.fence > first.fence and rerun.token != first.token
    assert coord.pending("a1") is None
    assert coord.lease_holder("a1") == LeaseHolder(rerun.token, rerun.fence)
    assert coord.finish(first) is None  # a repeated finish: nothing handed out, nothing changed
    assert coord.lease_holder("a1") == LeaseHolder(rerun.token, rerun.fence)
    assert not coord.renew(first) and coord.renew(rerun)
    assert coord.finish(rerun) is None  # nothing pending: released
    assert coord.lease_holder("a1") is None
    assert run_keys(redis_client) == ["rsi:a1:fence"]


def test_fences_increase_per_agent(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    fences = []
    for i in range(5):
        lease = coord.try_begin("a1", f"io{i}")
        assert lease is not None
        fences.append(lease.fence)
        if i % 2:
            assert coord.try_begin("a1", f"pending{i}") is None
            rerun = coord.finish(lease)
            assert rerun is not None
            fences.append(rerun.fence)
            lease = rerun
        assert coord.finish(lease) is None
    assert fences == sorted(set(fences)) and fences[-1] - fences[0] == len(fences) - 1


def test_fences_keep_increasing_after_redis_lost_its_data(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    for i in range(3):
        lease = coord.try_begin("a1", f"io{i}")
        assert lease is not None and coord.finish(lease) is None
    before = int(redis_client.get(fence_key("a1")) or 0)
    redis_client.flushall()  # what a restart without persistence does
    lease = coord.try_begin("a1", "io9")
    assert lease is not None and lease.fence > before
    assert lease.fence > 10**15  # seeded from the server clock, in microseconds


def test_renew_extends_and_expiry_loses_the_lease(redis_client: redis.Redis) -> None:
    """The lease is long (60 s) and the test shortens its TTL itself, so no pause of a loaded
    machine can expire it before the renewal, and the expiry is still Redis's own."""
    coord = Coordinator(redis_client, lease_s=60)
    lease = coord.try_begin("a1", "io1")
    assert lease is not None
    assert coord.try_begin("a1", "io2") is None
    redis_client.pexpire(lease_key("a1"), 10_000)  # the holder stopped renewing a while ago
    assert coord.renew(lease) and redis_client.pttl(lease_key("a1")) > 10_000  # back to lease_s
    redis_client.pexpire(lease_key("a1"), 1)  # the holder stops renewing: Redis expires the key
    deadline = time.monotonic() + 60
    while redis_client.pttl(lease_key("a1")) != -2:  # -2: the key is gone
        assert time.monotonic() < deadline, "the lease did not expire"
        time.sleep(0.05)
    assert not coord.renew(lease)
    assert coord.finish(lease) is None  # lost: nothing is changed, the pending io stays
    assert coord.pending("a1") == "io2"
    assert coord.lease_holder("a1") is None
    newer = coord.try_begin("a1", "io3")
    assert newer is not None and newer.fence > lease.fence
    assert coord.pending("a1") is None  # the new run covers the stale pending turn
    assert not coord.renew(lease)


def test_sweeper_helpers(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    assert coord.begin_pending("a1") is None  # nothing pending
    lease = coord.try_begin("a1", "io1")
    assert lease is not None and coord.try_begin("a1", "io2") is None
    assert coord.begin_pending("a1") is None  # the lease is held: its holder takes the pending io
    assert not coord.delete_lease_if("a1", "someone-else")
    assert coord.delete_lease_if("a1", lease.token)
    resumed = coord.begin_pending("a1")
    assert isinstance(resumed, Lease) and resumed.io == "io2" and resumed.fence > lease.fence
    assert coord.pending("a1") is None
    assert coord.lease_holder("a1") == LeaseHolder(resumed.token, resumed.fence)


def test_64_threads_one_lease(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    barrier = threading.Barrier(64)

    def one(i: int) -> Lease | None:
        barrier.wait()
        return coord.try_begin("a1", f"io{i}")

    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, range(64)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    losers = {f"io{i}" for i, r in enumerate(results) if r is None}
    assert len(losers) == 63 and coord.pending("a1") in losers
    assert coord.lease_holder("a1") == LeaseHolder(winners[0].token, winners[0].fence)


def test_4_processes_64_threads_one_lease(redis_url: str) -> None:
    """Real redis only: fakeredis is an in-process server (embedded mode never shares it across
    processes), and serving it over TCP to 64 clients measures its threading, not our protocol."""
    redis_endpoint = redis_url
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=race_try_begin, args=(redis_endpoint, "a1", p, 16, start, out))
             for p in range(4)]
    for p in procs:
        p.start()
    results = [r for _ in procs for r in out.get(timeout=120)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(results) == 64
    winners = [(io, fence) for io, fence in results if fence is not None]
    assert len(winners) == 1
    client: redis.Redis = redis.Redis.from_url(redis_endpoint)
    try:
        coord = Coordinator(client, lease_s=30)
        holder = coord.lease_holder("a1")
        assert holder is not None and holder.fence == winners[0][1]
        assert coord.pending("a1") in {io for io, fence in results if fence is None}
    finally:
        client.close()


def test_publish_harness_change(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    pubsub = redis_client.pubsub()
    pubsub.subscribe(HARNESS_CHANNEL)
    try:
        deadline = time.monotonic() + 60
        while pubsub.get_message(timeout=0.1) is None:  # the subscribe confirmation
            assert time.monotonic() < deadline
        assert coord.publish_harness_change("agent-7") == 1
        message = None
        while message is None:
            assert time.monotonic() < deadline
            message = pubsub.get_message(timeout=0.1)
        assert message["channel"] == HARNESS_CHANNEL.encode() and message["data"] == b"agent-7"
    finally:
        pubsub.close()
