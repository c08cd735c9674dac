"""The sweeper (docs/algorithm/consolidation.md §3.12.3): expired leases and stale runs, pending turns,
worlds never handed off."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import redis
from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.client import RsiClient, redis_client
from rsi_common.coord import Coordinator, Lease, lease_key
from rsi_common.dispatch import KombuDispatcher, RecordingDispatcher
from rsi_common.harness import H0_VERSION
from rsi_common.record_retry import HANDOFF_BUDGET_S, RetryBudget
from rsi_worker.cluster.sweeper import LEASE_EXPIRED_REASON, STALE_REASON, SweepReport, sweep
from tests.integration.client.conftest import make_world
from tests.integration.client.helpers import closed_url, queued_messages

pytestmark = pytest.mark.timeout(120)
HANDOFF_DELAYS = RetryBudget(HANDOFF_BUDGET_S).delays()
"""The pauses of a hand-off that finds Redis or the broker down (its retries, then ``deferred``)."""


def _world(sessions: sessionmaker[Session], agent: str, io: str) -> db.WorldRow:
    with sessions() as s:
        row = db.world_by_io(s, agent, io)
        assert row is not None
        return row


def _run(sessions: sessionmaker[Session], run_id: str) -> db.RunRow:
    with sessions() as s:
        return db.get_run(s, run_id)


def _start(sessions: sessionmaker[Session], agent: str, fence: int, io: str) -> str:
    """What the consolidate task does first (docs/algorithm/consolidation.md §3.3 step 1)."""
    with sessions.begin() as s:
        return db.start_run(s, agent, fence=fence, io_id=io).id


def _expire_lease(coord: Coordinator, agent: str, timeout_s: float = 60.0) -> None:
    """The run stops renewing: the lease's key gets a 1 ms TTL and Redis expires it. The lease
    itself is long (60 s), so no step of a test can lose it to a slow machine before this."""
    coord.client.pexpire(lease_key(agent), 1)
    deadline = time.monotonic() + timeout_s
    while coord.lease_holder(agent) is not None:
        assert time.monotonic() < deadline, "the lease did not expire"
        time.sleep(0.02)


def _sweep(client: RsiClient, sessions: sessionmaker[Session], dispatcher: object = None,
           coord: Coordinator | None = None, grace_s: float = 0.0) -> SweepReport:
    """One sweep after the client wrote its hand-off marks (within ``mark_delay_s``, far below the
    real grace of 60 s; these sweeps use a grace of 0)."""
    client.flush_marks()
    return sweep(sessions, coord or client.coord, dispatcher or client.dispatcher,  # type: ignore[arg-type]
                 client.settings, grace_s=grace_s)


def test_broker_down_defers_quickly_and_the_sweeper_enqueues_later(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session], rclient: redis.Redis,
    redis_url: str,
) -> None:
    dead = KombuDispatcher(closed_url())
    live = KombuDispatcher(redis_url)
    try:
        client = make_client(dispatcher=dead)
        pauses: list[float] = []
        client._sleep = pauses.append  # the hand-off's pauses, counted rather than slept
        start = time.perf_counter()
        rec = client.record_turn("a1", {"world": make_world("io1", 1.0)})
        elapsed = time.perf_counter() - start
        # the hand-off tried again only within its own budget, then deferred the trigger
        assert rec.dispatched == "deferred" and pauses == HANDOFF_DELAYS
        # a hang guard, not a speed figure: a dead broker refuses at once and no pause is slept;
        # only a hand-off that waited on the broker would take 10 s
        assert elapsed < 10.0
        assert rclient.get(lease_key("a1")) is None  # the lease of the failed enqueue was released
        assert _world(sessions, "a1", "io1").enqueued_at is None
        assert _sweep(client, sessions, live, grace_s=60).worlds_found == 0  # still in its grace period
        report = _sweep(client, sessions, live)
        assert (report.worlds_found, report.agents_triggered, report.enqueued) == (1, 1, 1)
        assert report.worlds_marked == 1
        (msg,) = queued_messages(rclient)
        agent, io, token, _fence = msg["decoded"][0]
        assert (agent, io) == ("a1", "io1") and client.coord.lease_holder("a1").token == token  # type: ignore[union-attr]
        assert _world(sessions, "a1", "io1").enqueued_at is not None
        assert _sweep(client, sessions, live).actions == 0
    finally:
        dead.close()
        live.close()


def test_redis_down_defers_quickly_and_the_sweeper_enqueues_later(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session], recorder: RecordingDispatcher,
    rclient: redis.Redis,
) -> None:
    dead = redis_client(closed_url())
    try:
        client = make_client(redis=dead, overrides={"harness_cache_ttl_s": 0})
        for i in (1, 2):
            pauses: list[float] = []
            client._sleep = pauses.append  # the hand-off's pauses, counted rather than slept
            start = time.perf_counter()
            rec = client.record_turn("a1", {"world": make_world(f"io{i}", float(i))})
            assert rec.dispatched == "deferred" and pauses == HANDOFF_DELAYS
            assert time.perf_counter() - start < 10.0  # a hang guard: nothing waits, nothing is slept
        assert recorder.calls == []
        assert client.current_harness("a1").version == H0_VERSION
        report = _sweep(client, sessions, recorder, Coordinator(rclient, 60))
        assert (report.worlds_found, report.agents_triggered, report.worlds_marked) == (2, 1, 2)
        (call,) = recorder.calls
        assert call.args[:2] == ["a1", "io2"]  # the newest world triggers the agent
    finally:
        dead.close()


def test_expired_lease_interrupts_the_run_and_resumes_its_pending_turn(
    client: RsiClient, sessions: sessionmaker[Session], recorder: RecordingDispatcher, rclient: redis.Redis
) -> None:
    client.coord = Coordinator(rclient, lease_s=60)
    client.record_turn("a1", {"world": make_world("io1", 1.0)})
    _, _, token, fence = recorder.calls[0].args
    run_id = _start(sessions, "a1", fence, "io1")
    assert client.record_turn("a1", {"world": make_world("io2", 2.0)}).dispatched == "pending"
    fresh = _sweep(client, sessions)
    assert (fresh.runs_checked, fresh.actions) == (1, 0)
    _expire_lease(client.coord, "a1")
    report = _sweep(client, sessions)
    assert (report.lease_expired, report.stale, report.pending_enqueued, report.enqueued) == (1, 0, 1, 1)
    run = _run(sessions, run_id)
    assert (run.status, run.reason) == ("interrupted", LEASE_EXPIRED_REASON)
    _, io2, token2, fence2 = recorder.calls[1].args
    assert io2 == "io2" and fence2 > fence and client.coord.lease_holder("a1").token == token2  # type: ignore[union-attr]
    old = Lease("a1", token, fence, "io1")
    assert client.coord.finish(old) is None and not client.coord.renew(old)
    assert client.coord.lease_holder("a1").token == token2  # type: ignore[union-attr]
    with sessions.begin() as s:
        stale_write = db.final_write(s, run_id, status="recorded", state={"t": 99})
    assert stale_write.outcome == "superseded" and stale_write.agent.state == {}
    new_run = _start(sessions, "a1", fence2, "io2")
    with sessions.begin() as s:
        assert db.final_write(s, new_run, status="recorded", state={"t": 1}).outcome == "written"
    with sessions.begin() as s:
        assert db.final_write(s, run_id, status="recorded", state={"t": 99}).outcome == "superseded"
    assert client.agent("a1").applied_fence == fence2
    assert _sweep(client, sessions).actions == 0


def test_a_run_older_than_run_stale_s_is_interrupted_and_its_lease_deleted(
    client: RsiClient, sessions: sessionmaker[Session], recorder: RecordingDispatcher
) -> None:
    client.record_turn("a1", {"world": make_world("io1", 1.0)})
    _, _, token, fence = recorder.calls[0].args
    run_id = _start(sessions, "a1", fence, "io1")
    client.record_turn("a1", {"world": make_world("io2", 2.0)})
    with sessions.begin() as s:
        db.get_run(s, run_id).started_at = datetime(2000, 1, 1, tzinfo=UTC)
    assert client.coord.lease_holder("a1").fence == fence  # type: ignore[union-attr]  # still renewed
    report = _sweep(client, sessions)
    assert (report.stale, report.lease_expired) == (1, 0)
    assert (report.leases_deleted, report.pending_enqueued) == (1, 1)
    assert _run(sessions, run_id).reason == STALE_REASON
    assert recorder.calls[1].args[1] == "io2"
    assert not client.coord.renew(Lease("a1", token, fence, "io1"))  # the old run must stop now
    assert _sweep(client, sessions).actions == 0


def test_failed_resume_is_retried_by_the_next_sweep(
    client: RsiClient, sessions: sessionmaker[Session], recorder: RecordingDispatcher, rclient: redis.Redis
) -> None:
    client.coord = Coordinator(rclient, lease_s=60)
    client.record_turn("a1", {"world": make_world("io1", 1.0)})
    run_id = _start(sessions, "a1", recorder.calls[0].args[3], "io1")
    client.record_turn("a1", {"world": make_world("io2", 2.0)})
    _expire_lease(client.coord, "a1")
    recorder.fail = True
    report = _sweep(client, sessions)
    # the resume failed, and step 2 (grace 0) retried the un-marked turn at once: failed too
    assert (report.lease_expired, report.deferred, report.enqueued) == (1, 2, 0)
    assert _run(sessions, run_id).status == "interrupted"
    assert client.coord.lease_holder("a1") is None and client.coord.pending("a1") is None
    assert _world(sessions, "a1", "io2").enqueued_at is None
    recorder.fail = False
    report = _sweep(client, sessions)
    assert (report.agents_triggered, report.enqueued) == (1, 1)
    assert recorder.calls[-1].args[1] == "io2"


def test_frozen_agents_worlds_are_marked_without_a_trigger(
    client: RsiClient, sessions: sessionmaker[Session], recorder: RecordingDispatcher
) -> None:
    recorder.fail = True
    assert client.record_turn("a1", {"world": make_world("io1", 1.0)}).dispatched == "deferred"
    recorder.fail = False
    client.freeze("a1")
    report = _sweep(client, sessions)
    assert (report.frozen_marked, report.worlds_marked, report.enqueued) == (1, 1, 0)
    assert recorder.calls == [] and _world(sessions, "a1", "io1").enqueued_at is not None


def test_redis_down_closes_runs_by_age_only(
    client: RsiClient, sessions: sessionmaker[Session], recorder: RecordingDispatcher
) -> None:
    client.record_turn("a1", {"world": make_world("io1", 1.0)})
    old = _start(sessions, "a1", recorder.calls[0].args[3], "io1")
    client.record_turn("a2", {"world": make_world("io1", 1.0)})
    young = _start(sessions, "a2", recorder.calls[1].args[3], "io1")
    with sessions.begin() as s:
        db.get_run(s, old).started_at = datetime(2000, 1, 1, tzinfo=UTC)
    recorder.fail = True
    client.record_turn("a3", {"world": make_world("io1", 1.0)})
    dead = redis_client(closed_url())
    try:
        report = _sweep(client, sessions, coord=Coordinator(dead, 60))
    finally:
        dead.close()
    assert (report.redis_ok, report.stale, report.lease_expired, report.deferred, report.errors) == (
        False, 1, 0, 1, 0)
    assert _run(sessions, old).status == "interrupted" and _run(sessions, young).status == "running"
