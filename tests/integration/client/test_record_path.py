"""The cheap record path of ``RsiClient`` (docs/performance/record-path.md) on SQLite and PostgreSQL
with a real redis-server: statements per turn, the batched hand-off marks (next transaction, idle
flush, close, failure, record_signals) and what the sweeper sees when a mark is lost."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from rsi_common import client as client_module
from rsi_common import db
from rsi_common.client import RsiClient
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import TurnNotStored
from rsi_worker.cluster.sweeper import sweep
from tests.integration.client.conftest import make_world

pytestmark = pytest.mark.timeout(120)


def _enqueued(sessions: sessionmaker[Session], agent: str, io: str) -> bool:
    with sessions() as s:
        row = db.world_by_io(s, agent, io)
        assert row is not None
        return row.enqueued_at is not None


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


def test_a_steady_turn_runs_at_most_four_statements(make_client: Callable[..., RsiClient],
                                                     engine: Engine) -> None:
    client = make_client(mark_delay_s=3600)
    first = {"world": make_world("io0", 0.0), "trajectory": {"trajectory_id": "t0", "status": "ok"}}
    assert client.record_turn("a1", first).dispatched == "enqueued"
    with _statements(engine) as seen:
        rec = client.record_turn("a1", {"world": make_world("io1", 1.0),
                                        "trajectory": {"trajectory_id": "t1"}})
    assert rec.dispatched == "pending" and len(seen) <= 4
    assert seen[-3:] == ["INSERT INTO rsi_agents", "INSERT INTO rsi_worlds", "INSERT INTO rsi_trajectories"]


def test_due_marks_ride_on_the_next_record_transaction(
    make_client: Callable[..., RsiClient], engine: Engine, sessions: sessionmaker[Session]
) -> None:
    client = make_client(mark_delay_s=3600)  # the idle flush sleeps for an hour
    client.record_turn("a1", {"world": make_world("io1", 1.0)})
    assert not _enqueued(sessions, "a1", "io1")  # handed off; the mark waits
    client._marks.delay_s = 0  # due at once from now on
    with _statements(engine) as seen:
        client.record_turn("a1", {"world": make_world("io2", 2.0)})
    assert "UPDATE rsi_worlds SET" in seen  # in the same transaction as the new turn
    assert _enqueued(sessions, "a1", "io1") and not _enqueued(sessions, "a1", "io2")
    client.flush_marks()
    assert _enqueued(sessions, "a1", "io2")


def test_an_idle_client_writes_its_marks_within_the_delay(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session]
) -> None:
    client = make_client(mark_delay_s=0.1)
    client.record_turn("a1", {"world": make_world("io1", 1.0)})
    deadline = time.monotonic() + 60
    while not _enqueued(sessions, "a1", "io1"):
        assert time.monotonic() < deadline, "the idle flush did not write the mark"
        time.sleep(0.05)


def test_close_writes_the_pending_marks(make_client: Callable[..., RsiClient],
                                        sessions: sessionmaker[Session]) -> None:
    client = make_client(mark_delay_s=3600)
    client.record_turn("a1", {"world": make_world("io1", 1.0)})
    client.close()
    assert _enqueued(sessions, "a1", "io1")


def test_marks_of_a_failed_transaction_stay_pending(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(mark_delay_s=3600, record_retry_s=0)
    client.record_turn("a1", {"world": make_world("io1", 1.0)})
    client._marks.delay_s = 0

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("INSERT", {}, RuntimeError("the database went away"))

    monkeypatch.setattr(client_module, "record_world_turn", broken)
    with pytest.raises(TurnNotStored):  # no retry budget: the first transient error is final
        client.record_turn("a1", {"world": make_world("io2", 2.0)})
    assert not _enqueued(sessions, "a1", "io1")  # rolled back with the failed turn, and kept
    monkeypatch.undo()
    client.flush_marks()
    assert _enqueued(sessions, "a1", "io1")


def test_record_signals_writes_pending_marks_before_it_clears_the_world(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session], recorder: RecordingDispatcher
) -> None:
    client = make_client(mark_delay_s=3600)
    assert client.record_turn("a1", {"world": make_world("io1", 1.0)}).dispatched == "enqueued"
    assert not _enqueued(sessions, "a1", "io1")  # its mark is pending
    client.coord.client.delete(*client.coord.client.keys("rsi:*"))  # no lease: the next trigger enqueues
    recorder.fail = True  # ... and cannot
    assert client.record_signals("a1", "io1", {"stars": 1}).dispatched == "deferred"
    client.flush_marks()
    assert not _enqueued(sessions, "a1", "io1")  # the turn's mark came before the clear: the sweeper retries
    recorder.fail = False
    assert client.record_signals("a1", "io1", {"stars": 2}).dispatched == "enqueued"
    client.flush_marks()
    assert _enqueued(sessions, "a1", "io1")


def test_a_mark_lost_with_the_host_costs_one_more_trigger(
    make_client: Callable[..., RsiClient], sessions: sessionmaker[Session], recorder: RecordingDispatcher
) -> None:
    client = make_client(mark_delay_s=3600)
    assert client.record_turn("a1", {"world": make_world("io1", 1.0)}).dispatched == "enqueued"
    client._marks.take(due_only=False)  # the host died before writing the mark
    report = sweep(sessions, client.coord, client.dispatcher, client.settings, grace_s=0)
    assert (report.worlds_found, report.agents_triggered, report.pending_marked) == (1, 1, 1)
    assert len(recorder.calls) == 1 and client.coord.pending("a1") == "io1"  # the running run re-runs once
    assert _enqueued(sessions, "a1", "io1")


def test_agent_turns_count_every_recorded_turn(make_client: Callable[..., RsiClient],
                                                sessions: sessionmaker[Session]) -> None:
    client = make_client()
    for i in range(3):
        client.record_turn("a1", {"world": make_world(f"io{i}", float(i))})
    client.record_turn("a1", {"world": make_world("io0", 0.0)})  # a repeat counts
    client.record_turn("a1", {"own_loop": True, "io_id": "cli1"})
    with sessions() as s:
        assert s.execute(sa.select(db.AgentRow.turns).where(db.AgentRow.id == "a1")).scalar_one() == 5
