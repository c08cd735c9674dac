"""Worlds: seq numbering, idempotence, concurrency, retention, signals, sweeper view, trajectories."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db import (
    WorldRow,
    get_agent,
    get_world,
    load_latest_worlds,
    mark_enqueued,
    save_trajectory,
    save_world,
    trajectories,
    unenqueued_worlds,
    update_signals,
    world_by_io,
)
from rsi_common.errors import InvalidInput
from tests.integration.db.conftest import make_world


def _save(factory: sessionmaker[Session], agent: str, io: str, clock: float, conv: str = "c1",
          **kw: object) -> WorldRow:
    with factory.begin() as s:
        return save_world(s, agent, make_world(io, clock, conv), **kw)  # type: ignore[arg-type]


def test_seq_numbers_each_conversation_from_one(factory: sessionmaker[Session]) -> None:
    seqs = [
        (conv, _save(factory, "a1", f"io{i}", 1000.0 + i, conv).seq)
        for i, conv in enumerate(["c1", "c2", "c1", "c1", "c2", ""])
    ]
    assert seqs == [("c1", 1), ("c2", 1), ("c1", 2), ("c1", 3), ("c2", 2), ("", 1)]
    # another agent's conversation with the same id is numbered on its own
    assert _save(factory, "a2", "io0", 1.0, "c1").seq == 1


def test_save_creates_the_agent_and_fills_columns(factory: sessionmaker[Session]) -> None:
    row = _save(factory, "new-agent", "io1", 1234.5, signals={"stars": 2})
    assert row.id.startswith("w_") and len(row.id) == 26
    assert (row.model, row.provider, row.clock, row.bytes, row.replayable) == (
        "sim-1", "sim", 1234.5, 100, True)
    assert row.signals == {"stars": 2} and row.enqueued_at is None
    assert row.created_at.utcoffset() == timedelta(0)
    assert abs((row.created_at - datetime.now(UTC)).total_seconds()) < 60
    with factory.begin() as s:
        agent = get_agent(s, "new-agent")
        assert (agent.current_version, agent.frozen, agent.state, agent.applied_fence) == (None, False, {}, 0)


def test_save_is_idempotent_per_io(factory: sessionmaker[Session]) -> None:
    first = _save(factory, "a1", "io1", 1.0)
    again = _save(factory, "a1", "io1", 2.0, "other")
    assert again.id == first.id and again.seq == 1 and again.clock == 1.0
    with factory.begin() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(WorldRow)) == 1


def test_save_rejects_bad_records(factory: sessionmaker[Session]) -> None:
    with factory.begin() as s:
        with pytest.raises(InvalidInput):
            save_world(s, "a1", {**make_world("io1", 1.0), "io_id": None})
        with pytest.raises(InvalidInput):
            save_world(s, "a1", {**make_world("io1", 1.0), "clock": "soon"})
        with pytest.raises(InvalidInput):
            save_world(s, "a1", {**make_world("io1", 1.0), "agent_id": "someone-else"})


def test_concurrent_saves_get_distinct_consecutive_seqs(factory: sessionmaker[Session]) -> None:
    n_threads, per_thread = 8, 4
    barrier = threading.Barrier(n_threads)

    def work(t: int) -> list[int]:
        barrier.wait()
        return [_save(factory, "a1", f"io{t}-{i}", float(t * 10 + i)).seq for i in range(per_thread)]

    with ThreadPoolExecutor(n_threads) as pool:
        seqs = [s for chunk in pool.map(work, range(n_threads)) for s in chunk]
    assert sorted(seqs) == list(range(1, n_threads * per_thread + 1))


def test_retention_keeps_the_latest_60(factory: sessionmaker[Session]) -> None:
    for i in range(65):
        _save(factory, "a1", f"io{i}", 1000.0 + i, retention=60)
    _save(factory, "a2", "other", 1.0, retention=60)
    with factory.begin() as s:
        rows = load_latest_worlds(s, "a1", 100)
        assert [r.io_id for r in rows] == [f"io{i}" for i in range(64, 4, -1)]
        assert len(load_latest_worlds(s, "a2", 100)) == 1
        assert load_latest_worlds(s, "a1", 3)[0].io_id == "io64"


def test_latest_order_is_clock_then_seq(factory: sessionmaker[Session]) -> None:
    _save(factory, "a1", "old", 5.0)
    _save(factory, "a1", "tie1", 10.0)
    _save(factory, "a1", "tie2", 10.0)
    _save(factory, "a1", "newest-clock-but-saved-last", 20.0)
    with factory.begin() as s:
        assert [w.io_id for w in load_latest_worlds(s, "a1", 10)] == [
            "newest-clock-but-saved-last", "tie2", "tie1", "old"]


def test_update_signals_merges_or_replaces(factory: sessionmaker[Session]) -> None:
    row = _save(factory, "a1", "io1", 1.0, signals={"stars": 1, "issue": "wrong"})
    with factory.begin() as s:
        got = update_signals(s, "a1", {"implicit": {"kind": "correction"}}, world_id=row.id)
        assert got is not None
        assert got.signals == {"stars": 1, "issue": "wrong", "implicit": {"kind": "correction"}}
    with factory.begin() as s:
        got = update_signals(s, "a1", {"stars": 5}, io_id="io1", replace=True)
        assert got is not None and got.signals == {"stars": 5}
    with factory.begin() as s:
        assert update_signals(s, "a1", {"stars": 5}, io_id="missing") is None
        assert update_signals(s, "other-agent", {"stars": 5}, world_id=row.id) is None
        with pytest.raises(InvalidInput):
            update_signals(s, "a1", {}, world_id=row.id, io_id="io1")
        w = world_by_io(s, "a1", "io1")
        assert w is not None and w.signals == {"stars": 5}


def test_json_round_trips_exactly_with_key_order(factory: sessionmaker[Session]) -> None:
    schema = {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}
    world = make_world("io1", 1.0, tools={"defs": [{"name": "t", "input_schema": schema}]},
                       text="é ✓ \u0000 \\", n=0.1 + 0.2)
    with factory.begin() as s:
        row = save_world(s, "a1", world)
    with factory.begin() as s:
        stored = get_world(s, row.id)
        assert stored is not None and stored.world == world
        assert list(stored.world["tools"]["defs"][0]["input_schema"]["properties"]) == ["zeta", "alpha"]
        assert list(stored.world) == list(world)


def test_unenqueued_worlds_for_the_sweeper(factory: sessionmaker[Session]) -> None:
    a = _save(factory, "a1", "io1", 1.0)
    b = _save(factory, "a1", "io2", 2.0, enqueued=True)
    c = _save(factory, "a2", "io1", 3.0)
    assert b.enqueued_at is not None and b.enqueued_at.tzinfo is not None
    with factory.begin() as s:
        assert unenqueued_worlds(s, grace_s=3600) == []
    assert [w.id for w in _poll_unenqueued(factory, 2)] == [a.id, c.id]
    with factory.begin() as s:
        assert mark_enqueued(s, [a.id, b.id]) == 1
        assert mark_enqueued(s, []) == 0
    assert [w.id for w in _poll_unenqueued(factory, 1)] == [c.id]


def _poll_unenqueued(factory: sessionmaker[Session], n: int) -> list[WorldRow]:
    """With grace 0 a row is listed once the database clock passed its creation time; on SQLite
    (millisecond clock) that may take a moment, so ask again in new transactions (bounded)."""
    deadline = time.monotonic() + 60
    while True:
        with factory.begin() as s:
            rows = unenqueued_worlds(s, grace_s=0)
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.002)


def test_trajectories_are_idempotent_and_bounded(factory: sessionmaker[Session]) -> None:
    rec = {"trajectory_id": "t1", "agent_id": "a1", "io_id": "io1", "status": "completed",
           "steps": {"model_calls": 2, "iterations": 2, "tool_calls": 1, "tool_errors": 0},
           "policy_tokens": 321, "params_read": ["x.params.y"], "error": "E" * 400, "unknown_key": 1}
    with factory.begin() as s:
        row = save_trajectory(s, rec)
        assert row.policy_tokens == 321 and row.error == "E" * 300
        assert save_trajectory(s, {**rec, "policy_tokens": 1}).policy_tokens == 321
        for i in range(2, 6):
            save_trajectory(s, {**rec, "trajectory_id": f"t{i}"}, retention=3)
        assert len(trajectories(s, "a1")) == 3
        with pytest.raises(InvalidInput):
            save_trajectory(s, {"agent_id": "a1"})
