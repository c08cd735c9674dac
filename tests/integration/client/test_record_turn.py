"""``RsiClient.record_turn`` / ``record_signals`` (docs/algorithm/consolidation.md §3.12.1, §3.12.4,
docs/formats.md §4.1) on SQLite and PostgreSQL
with a real redis-server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.client import OWN_LOOP_REASON, RsiClient
from rsi_common.coord import Coordinator, Lease, lease_key, pending_key
from rsi_common.dispatch import QUEUE_CONSOLIDATE, TASK_CONSOLIDATE, RecordingDispatcher
from rsi_common.errors import InvalidInput, UnknownAgentError, WorldError
from rsi_common.world import MAX_WORLD_BYTES
from tests.integration.client.conftest import make_world
from tests.integration.client.helpers import row_counts

pytestmark = pytest.mark.timeout(120)


def _world_rows(sessions: sessionmaker[Session], agent: str) -> list[db.WorldRow]:
    with sessions() as s:
        return list(s.execute(sa.select(db.WorldRow).where(db.WorldRow.agent_id == agent)
                              .order_by(db.WorldRow.clock)).scalars())


def test_malformed_world_names_the_field_and_stores_nothing(
    client: RsiClient, engine: Engine, rclient: redis.Redis, recorder: RecordingDispatcher
) -> None:
    bad = make_world("io1")
    bad["tools"]["calls"][0]["name"] = 7
    with pytest.raises(WorldError, match=r"tools\.calls\[0\]\.name"):
        client.record_turn("a1", {"world": bad})
    missing = make_world("io1")
    del missing["plan"]
    with pytest.raises(WorldError, match=r"^plan"):
        client.record_turn("a1", {"world": missing})
    with pytest.raises(WorldError, match="agent_id: the world names agent 'other'"):
        client.record_turn("a1", {"world": make_world("io1", agent="other")})
    with pytest.raises(InvalidInput, match=r"signals\.stars"):
        client.record_turn("a1", {"world": make_world("io1"), "signals": {"stars": 9}})
    with pytest.raises(InvalidInput, match=r"signals\.start: unknown signal"):
        client.record_turn("a1", {"world": make_world("io1"), "signals": {"start": 3}})
    with pytest.raises(InvalidInput, match="unknown key"):
        client.record_turn("a1", {"world": make_world("io1"), "worl": {}})
    assert set(row_counts(engine).values()) == {0}
    assert recorder.calls == [] and rclient.keys("*") == []


def test_a_3mb_world_is_stored_not_replayable(client: RsiClient, sessions: sessionmaker[Session]) -> None:
    big = make_world("io-big")
    big["state"]["messages"] = [{"role": "user", "content": "x" * 3_000_000}]
    rec = client.record_turn("a1", {"world": big})
    assert rec.replayable is False and rec.dispatched == "enqueued"
    (row,) = _world_rows(sessions, "a1")
    assert row.replayable is False and row.world["replayable"] is False
    assert row.world["state"]["messages"] == [] and 0 < row.bytes <= MAX_WORLD_BYTES


def test_first_turn_enqueues_later_turns_set_pending(
    client: RsiClient, sessions: sessionmaker[Session], rclient: redis.Redis, recorder: RecordingDispatcher
) -> None:
    traj = {"trajectory_id": "t_1", "status": "ok", "policy_tokens": 12}
    first = client.record_turn("a1", {"world": make_world("io1", 1.0), "trajectory": traj,
                                      "signals": {"stars": 4, "comment": "ok"}})
    assert (first.dispatched, first.seq, first.replayable) == ("enqueued", 1, True)
    (call,) = recorder.calls
    assert (call.task, call.queue, call.task_id) == (TASK_CONSOLIDATE, QUEUE_CONSOLIDATE, first.task_id)
    agent, io, token, fence = call.args
    assert (agent, io) == ("a1", "io1") and rclient.get(lease_key("a1")) == token.encode()
    assert client.coord.lease_holder("a1").fence == fence  # type: ignore[union-attr]
    second = client.record_turn("a1", {"world": make_world("io2", 2.0)})
    other = client.record_turn("a1", {"world": make_world("io3", 3.0, interaction="c2")})
    assert (second.dispatched, second.seq) == ("pending", 2)
    assert (other.dispatched, other.seq) == ("pending", 1)
    assert rclient.get(pending_key("a1")) == b"io3" and len(recorder.calls) == 1
    client.flush_marks()  # the hand-off marks are otherwise written within mark_delay_s
    rows = _world_rows(sessions, "a1")
    assert [r.io_id for r in rows] == ["io1", "io2", "io3"] and all(r.enqueued_at for r in rows)
    assert rows[0].signals == {"stars": 4, "comment": "ok"} and rows[0].world["agent_id"] == "a1"
    with sessions() as s:
        (t,) = db.trajectories(s, "a1")
    assert (t.id, t.io_id, t.policy_tokens) == ("t_1", "io1", 12)
    again = client.record_turn("a1", {"world": make_world("io1", 1.0)})
    assert (again.world_id, again.seq) == (first.world_id, 1) and len(_world_rows(sessions, "a1")) == 3


def test_frozen_agent_records_and_never_enqueues(
    client: RsiClient, sessions: sessionmaker[Session], rclient: redis.Redis, recorder: RecordingDispatcher
) -> None:
    client.record_turn("a1", {"world": make_world("io1", 1.0)})
    client.coord.finish(Lease("a1", recorder.calls[0].args[2], recorder.calls[0].args[3], "io1"))
    client.freeze("a1")
    rec = client.record_turn("a1", {"world": make_world("io2", 2.0)})
    assert rec.dispatched == "frozen" and len(recorder.calls) == 1
    assert rclient.get(lease_key("a1")) is None and rclient.get(pending_key("a1")) is None
    client.flush_marks()
    assert all(r.enqueued_at is not None for r in _world_rows(sessions, "a1"))  # the sweeper ignores it
    assert client.record_signals("a1", "io2", {"stars": 1}).dispatched == "frozen"
    client.unfreeze("a1")
    assert client.record_turn("a1", {"world": make_world("io3", 3.0)}).dispatched == "enqueued"


def test_record_world_off_stores_the_trajectory_only(
    make_client: Callable[..., RsiClient], engine: Engine, recorder: RecordingDispatcher
) -> None:
    client = make_client(overrides={"record_world": False})
    rec = client.record_turn("a1", {"world": make_world("io1"), "trajectory": {"trajectory_id": "t_1"}})
    assert (rec.dispatched, rec.world_id, rec.io_id) == ("off", None, "io1")
    counts = row_counts(engine)
    assert (counts["rsi_worlds"], counts["rsi_trajectories"], counts["rsi_runs"]) == (0, 1, 0)
    assert recorder.calls == []


def test_own_loop_turn_gets_one_skipped_run(client: RsiClient, recorder: RecordingDispatcher) -> None:
    rec = client.record_turn("a1", {"world": None, "own_loop": True, "io_id": "io1",
                                    "trajectory": {"trajectory_id": "t_1", "provider": "cli"}})
    assert (rec.dispatched, rec.world_id, rec.seq, rec.replayable) == ("skipped", None, None, False)
    (run,) = client.runs("a1")
    assert (run.status, run.reason, run.io_id, run.fence) == ("skipped", OWN_LOOP_REASON, "io1", None)
    assert recorder.calls == []
    with pytest.raises(InvalidInput, match="own_loop"):
        client.record_turn("a1", {"world": make_world("io2"), "own_loop": True})
    with pytest.raises(InvalidInput, match="io_id"):
        client.record_turn("a1", {"own_loop": True})


def test_record_signals_merges_and_never_overwrites_implicit(
    client: RsiClient, sessions: sessionmaker[Session], recorder: RecordingDispatcher
) -> None:
    client.record_turn("a1", {"world": make_world("io1", 1.0), "signals": {"comment": "meh"}})
    implicit = {"kind": "correction", "criterion": "use EUR", "evidence": "user said so"}
    with sessions.begin() as s:
        db.update_signals(s, "a1", {"implicit": implicit}, io_id="io1")
    rec = client.record_signals("a1", "io1", {"stars": 2, "issue": "wrong currency",
                                              "implicit": {"kind": "accept"}})
    assert rec.dispatched == "pending"  # the first run still holds the lease
    client.flush_marks()
    (row,) = _world_rows(sessions, "a1")
    assert row.signals == {"comment": "meh", "implicit": implicit, "stars": 2, "issue": "wrong currency"}
    assert row.enqueued_at is not None
    with pytest.raises(InvalidInput, match="no stored world for io 'nope'"):
        client.record_signals("a1", "nope", {"stars": 2})
    with pytest.raises(UnknownAgentError, match="unknown agent 'ghost'"):
        client.record_signals("ghost", "io1", {"stars": 2})
    with pytest.raises(InvalidInput, match=r"signals\.criteria"):
        client.record_signals("a1", "io1", {"criteria": "not a list"})


def test_retention_keeps_latest_60_worlds_and_200_runs(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session]
) -> None:
    client = make_client(trajectory_retention=5, retention_every=1)  # exact: on every turn
    for i in range(70):
        client.record_turn("a1", {"world": make_world(f"io{i}", 1000.0 + i),
                                  "trajectory": {"trajectory_id": f"t_{i}"}})
    for i in range(210):
        client.record_turn("a1", {"own_loop": True, "io_id": f"cli{i}"})
    rows = _world_rows(sessions, "a1")
    assert [r.io_id for r in rows] == [f"io{i}" for i in range(10, 70)]
    assert len(client.runs("a1", limit=1000)) == 200
    with sessions() as s:
        assert [t.id for t in db.trajectories(s, "a1")] == [f"t_{i}" for i in range(69, 64, -1)]


class _OrderedCoordinator(Coordinator):
    """Serialises ``try_begin`` and records the order in which Redis saw the turns."""

    def __init__(self, client: redis.Redis, lease_s: float) -> None:
        super().__init__(client, lease_s)
        self.order: list[str] = []
        self._order_lock = threading.Lock()

    def try_begin(self, agent: str, io: str) -> Lease | None:
        with self._order_lock:
            self.order.append(io)
            return super().try_begin(agent, io)


def test_100_concurrent_turns_give_one_enqueue_and_the_newest_pending(
    make_client: Callable[..., RsiClient], rclient: redis.Redis, sessions: sessionmaker[Session],
    recorder: RecordingDispatcher
) -> None:
    client = make_client(retention_every=1)  # the exact retention bound, checked below
    spy = _OrderedCoordinator(rclient, lease_s=60)
    client.coord = spy
    barrier = threading.Barrier(20)

    def record(i: int) -> str:
        if i < 20:
            barrier.wait(60)
        return client.record_turn("a1", {"world": make_world(f"io{i:03d}", 5000.0 + i)}).dispatched

    with ThreadPoolExecutor(max_workers=20) as pool:
        outcomes = list(pool.map(record, range(100)))
    assert sorted(outcomes).count("enqueued") == 1 and outcomes.count("pending") == 99
    (call,) = recorder.calls
    assert call.args[1] == spy.order[0] and len(spy.order) == 100
    assert client.coord.pending("a1") == spy.order[-1]
    client.flush_marks()
    rows = _world_rows(sessions, "a1")
    assert len(rows) == 60 and all(r.enqueued_at is not None for r in rows)
    assert [r.io_id for r in rows] == [f"io{i:03d}" for i in range(40, 100)]
    assert len({r.seq for r in rows}) == 60 and max(r.seq for r in rows) <= 100


def test_embedded_in_process_mode_uses_fakeredis_and_the_memory_broker(engine: Engine, db_url: str) -> None:
    import fakeredis
    from kombu import Connection

    from rsi_common.config import Settings
    from rsi_common.dispatch import KombuDispatcher, celery_queue

    dispatcher = KombuDispatcher("memory://")
    fake = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    try:
        with Connection("memory://") as conn:
            queue = celery_queue(QUEUE_CONSOLIDATE)(conn.default_channel)
            queue.declare()
            queue.purge()
            with RsiClient(Settings(database_url=db_url), engine=engine, redis=fake,
                           dispatcher=dispatcher) as client:
                rec = client.record_turn("a1", {"world": make_world("io1")})
                assert client.start_listener(wait_s=60)
            msg = queue.get(no_ack=True)
            assert msg is not None and msg.headers["id"] == rec.task_id
            assert msg.decode()[0][:2] == ["a1", "io1"]
    finally:
        dispatcher.close()
        fake.close()
