"""The record path's statements (:mod:`rsi_common.db.record`, docs/performance/record-path.md) on
SQLite and PostgreSQL: the agent upsert, the world insert numbering ``seq`` in the statement, the
idempotent repeat, the frozen mark, the bare and own-loop turns, the amortised retention and its
bound, and the statements a steady turn runs."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.db.record import (
    RETENTION_EVERY,
    AgentTurn,
    StoredWorld,
    mark_handed_off,
    record_bare_turn,
    record_world_turn,
)
from tests.integration.db.conftest import make_world


def _record(engine: Engine, agent: str, io: str, clock: float, *, interaction: str = "c1",
            trajectory: dict[str, Any] | None = None, retention: int | None = 60,
            every: int = RETENTION_EVERY, trajectory_retention: int | None = None,
            ) -> tuple[AgentTurn, StoredWorld]:
    with engine.begin() as conn:
        return record_world_turn(conn, agent, make_world(io, clock, interaction), {"stars": 4}, trajectory,
                                 world_retention=retention, trajectory_retention=trajectory_retention,
                                 retention_every=every)


def _worlds(factory: sessionmaker[Session], agent: str) -> list[db.WorldRow]:
    with factory() as s:
        return list(s.execute(sa.select(db.WorldRow).where(db.WorldRow.agent_id == agent)
                              .order_by(db.WorldRow.clock)).scalars())


def test_the_first_turn_creates_the_agent_and_numbers_seq_per_conversation(
    engine: Engine, factory: sessionmaker[Session]
) -> None:
    agent, first = _record(engine, "a1", "io1", 1.0)
    assert (agent.frozen, agent.current_version, agent.turns) == (False, None, 1)
    assert (first.io_id, first.seq, first.replayable, first.new) == ("io1", 1, True, True)
    assert _record(engine, "a1", "io2", 2.0)[1].seq == 2
    assert _record(engine, "a1", "io3", 3.0, interaction="c2")[1].seq == 1
    agent, again = _record(engine, "a1", "io2", 9.0)  # the same turn: nothing new, the stored row
    assert (again.seq, again.new, agent.turns) == (2, False, 4)
    rows = _worlds(factory, "a1")
    assert [(r.io_id, r.interaction_id, r.seq, r.signals) for r in rows] == [
        ("io1", "c1", 1, {"stars": 4}), ("io2", "c1", 2, {"stars": 4}), ("io3", "c2", 1, {"stars": 4})]
    assert all(r.enqueued_at is None and r.created_at is not None for r in rows)
    assert rows[0].world["plan"] == {"name": "agent"} and rows[0].bytes == 100 and rows[0].clock == 1.0
    with factory() as s:
        agent_row = db.get_agent(s, "a1")
    assert (agent_row.turns, agent_row.state, agent_row.applied_fence) == (4, {}, 0)


def test_concurrent_turns_of_one_agent_get_distinct_seq(engine: Engine,
                                                         factory: sessionmaker[Session]) -> None:
    def one(i: int) -> int:
        return _record(engine, "a1", f"io{i:02d}", float(i), retention=None)[1].seq

    with ThreadPoolExecutor(max_workers=8) as pool:
        seqs = list(pool.map(one, range(40)))
    assert sorted(seqs) == list(range(1, 41))
    assert len(_worlds(factory, "a1")) == 40


def test_a_frozen_agents_world_is_stored_marked(engine: Engine, factory: sessionmaker[Session]) -> None:
    _record(engine, "a1", "io1", 1.0)
    with factory.begin() as s:
        db.freeze(s, "a1")
    agent, stored = _record(engine, "a1", "io2", 2.0)
    assert agent.frozen and stored.new
    again = _record(engine, "a1", "io1", 1.0)[1]  # saved before the freeze: marked now
    assert not again.new
    assert all(r.enqueued_at is not None for r in _worlds(factory, "a1"))


def test_marks_set_enqueued_at_once(engine: Engine, factory: sessionmaker[Session]) -> None:
    ids = [_record(engine, "a1", f"io{i}", float(i))[1].id for i in range(3)]
    with engine.begin() as conn:
        assert mark_handed_off(conn, [*ids[:2], "w_gone"]) == 2
        assert mark_handed_off(conn, ids) == 1
        assert mark_handed_off(conn, []) == 0
    assert all(r.enqueued_at is not None for r in _worlds(factory, "a1"))


def test_a_bare_turn_stores_the_trajectory_and_an_own_loop_turn_a_skipped_run(
    engine: Engine, factory: sessionmaker[Session]
) -> None:
    traj = {"trajectory_id": "t1", "agent_id": "a1", "io_id": "io1", "error": "E" * 400, "policy_tokens": 5}
    with engine.begin() as conn:
        agent = record_bare_turn(conn, "a1", traj, skipped_reason=None, io_id="io1",
                                 trajectory_retention=None, run_retention=200)
        record_bare_turn(conn, "a1", dict(traj, trajectory_id="t1"), skipped_reason="own loop", io_id="io2",
                         trajectory_retention=None, run_retention=200)
    assert agent.turns == 1
    with factory() as s:
        (t,) = db.trajectories(s, "a1")
        (run,) = db.runs(s, "a1", 10)
    assert (t.id, t.io_id, t.policy_tokens, len(t.error or ""), t.steps) == ("t1", "io1", 5, 300, {})
    assert (run.status, run.reason, run.io_id, run.fence, run.kind) == ("skipped", "own loop", "io2", None,
                                                                         "consolidate")
    assert run.result == {"status": "skipped", "reason": "own loop"} and run.finished_at is not None


def test_retention_runs_every_nth_turn_and_keeps_at_most_n_minus_one_extra(
    engine: Engine, factory: sessionmaker[Session]
) -> None:
    keep, every = 5, 4
    counts = []
    for i in range(1, 23):
        traj = {"trajectory_id": f"t{i}", "agent_id": "a1", "io_id": f"io{i}"}
        _record(engine, "a1", f"io{i}", float(i), trajectory=traj, retention=keep, every=every,
                trajectory_retention=keep)
        counts.append(len(_worlds(factory, "a1")))
        with factory() as s:
            assert len(db.trajectories(s, "a1", 100)) == counts[-1]
        if i % every == 0:
            assert counts[-1] == min(i, keep)  # the retention ran on this turn
        assert counts[-1] <= keep + every - 1
    assert max(counts) == keep + every - 1
    assert [r.io_id for r in _worlds(factory, "a1")] == [f"io{i}" for i in range(16, 23)]  # the latest


@contextmanager
def _statements(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()[:3]))

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)


def test_a_steady_turn_runs_three_statements_after_begin(engine: Engine) -> None:
    _record(engine, "a1", "io0", 0.0)
    with _statements(engine) as seen:
        traj = {"trajectory_id": "t1", "agent_id": "a1", "io_id": "io1"}
        _record(engine, "a1", "io1", 1.0, trajectory=traj)
    begin = ["BEGIN IMMEDIATE"] if engine.dialect.name == "sqlite" else []  # PostgreSQL: the driver's
    inserts = ["INSERT INTO rsi_agents", "INSERT INTO rsi_worlds", "INSERT INTO rsi_trajectories"]
    assert seen == [*begin, *inserts]
