"""The pool epoch's triggers and the per-process pool memo on both backends
(rsi_worker/consolidate/pool_memo.py, docs/performance/consolidation.md#the-no-signal-path): every
writer stamps what it changes, and the window built from the memo and the changed rows equals the full
read after random inserts (older clocks too), signal changes, taints, deletes and retention — written
through another engine (another process) as well."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db import (
    AgentRow,
    WorldRow,
    load_latest_heads,
    make_engine,
    mark_enqueued,
    retain_worlds,
    save_world,
    session_factory,
    update_signals,
)
from rsi_worker.consolidate import pool_memo
from rsi_worker.consolidate.pool_memo import Head, pool_window
from rsi_worker.consolidate.quiet import _SNAPSHOT
from rsi_worker.consolidate.quiet_sql import run
from tests.integration.db.conftest import make_world

N = 5


def _agent(factory: sessionmaker[Session], agent: str) -> tuple[int, float | None]:
    with factory() as s:
        row = s.execute(sa.select(AgentRow.pool_epoch, AgentRow.pool_floor).where(AgentRow.id == agent)).one()
        return int(row.pool_epoch), row.pool_floor


def _stamp(factory: sessionmaker[Session], world_id: str) -> int:
    with factory() as s:
        return int(s.execute(sa.select(WorldRow.stamp).where(WorldRow.id == world_id)).scalar_one())


def test_every_change_of_a_pool_column_is_stamped(engine: Engine) -> None:
    factory = session_factory(engine)
    with factory.begin() as s:
        a = save_world(s, "ep", make_world("io1", 1000.0), retention=None).id
        b = save_world(s, "ep", make_world("io2", 1001.0), retention=None).id
    assert _agent(factory, "ep") == (2, None) and (_stamp(factory, a), _stamp(factory, b)) == (1, 2)
    with factory.begin() as s:
        assert mark_enqueued(s, [a, b]) == 2  # the hand-off mark is not a pool column
    assert _agent(factory, "ep")[0] == 2
    with factory.begin() as s:
        update_signals(s, "ep", {"stars": 5}, world_id=a)
    assert _agent(factory, "ep")[0] == 3 and _stamp(factory, a) == 3
    with factory.begin() as s:  # any writer, here plain SQL
        s.execute(sa.update(WorldRow).where(WorldRow.id == b).values(tainted=True))
    assert _agent(factory, "ep")[0] == 4 and _stamp(factory, b) == 4
    with factory.begin() as s:
        s.execute(sa.delete(WorldRow).where(WorldRow.id == b))
    assert _agent(factory, "ep") == (4, 1001.0)
    with factory.begin() as s:  # a move lifts the floor to the old clock
        s.execute(sa.update(WorldRow).where(WorldRow.id == a).values(clock=2000.0))
    assert _agent(factory, "ep") == (5, 1001.0) and _stamp(factory, a) == 5


def _window(engine: Engine, agent: str, served: dict[str, int] | None = None) -> list[Head]:
    """The pool window as ``quiet.decide`` reads it; ``served`` counts full reads and memo windows."""
    reads: list[str] = []
    with engine.connect().execution_options(**_SNAPSHOT[engine.dialect.name]) as conn, conn.begin():
        row = run(conn, "agent", {"agent_id": agent, "fence": 0}).one()

        def full() -> Any:
            reads.append("full")
            return run(conn, "pool", {"agent_id": agent, "n": N}).all()

        got = pool_window(engine.url, agent, N, row, full=full,
                          changed=lambda since: run(conn, "changed", {"agent_id": agent,
                                                                      "since": since}).all())
    if served is not None:
        served["full" if reads else "memo"] += 1
    return got


def test_the_window_from_the_memo_equals_the_full_read(engine: Engine, db_url: str) -> None:
    rng = random.Random(10)
    other = make_engine(db_url)  # another process's writes
    factories = [session_factory(engine), session_factory(other)]
    pool_memo.clear()
    served = {"full": 0, "memo": 0}
    try:
        clock, ios = 1000.0, 0
        for _step in range(40):
            factory = rng.choice(factories)
            with factory.begin() as s:
                ids = [w.id for w in s.execute(sa.select(WorldRow.id).where(WorldRow.agent_id == "mem")
                                               .order_by(WorldRow.clock.desc()))]
                op = rng.random()
                if op < 0.5 or not ids:  # a new turn, now and then older than the window
                    ios += 1
                    clock += 1.0
                    when = clock - rng.choice([0, 0, 0, 3.5, 20.5])
                    save_world(s, "mem", make_world(f"io{ios}", when, f"c{ios}"), {"stars": 5} if
                               rng.random() < 0.2 else None, retention=rng.choice([None, None, 6, N]))
                elif op < 0.7:
                    update_signals(s, "mem", rng.choice([{"stars": 1}, {"issue": "wrong"}, {}]),
                                   world_id=rng.choice(ids), replace=True)
                elif op < 0.8:
                    s.execute(sa.update(WorldRow).where(WorldRow.id == rng.choice(ids))
                              .values(tainted=rng.random() < 0.7))
                elif op < 0.9:
                    s.execute(sa.delete(WorldRow).where(WorldRow.id == rng.choice(ids[:N + 2])))
                else:
                    retain_worlds(s, "mem", rng.randint(2, 8))
            if rng.random() < 0.6:  # not after every write: the memo goes stale by several
                got = _window(engine, "mem", served)
                with factories[0]() as s:
                    want = [Head.of(r) for r in load_latest_heads(s, "mem", N, signals_text=True)]
                assert got == want, _step
        assert served["memo"] >= 8 and served["full"] >= 3, served  # both ways were taken
    finally:
        other.dispose()
        pool_memo.clear()


def test_a_recreated_agent_does_not_match_its_old_memo(engine: Engine) -> None:
    """No code deletes an agent; if one is deleted and made again, its epoch starts over: a memo from
    before matches neither its ``created_at`` nor (here, first) an epoch it has not reached."""
    factory = session_factory(engine)
    pool_memo.clear()

    def recreate(io: str, clock: float, created: datetime) -> None:
        with factory.begin() as s:
            s.execute(sa.delete(WorldRow).where(WorldRow.agent_id == "re"))
            s.execute(sa.delete(AgentRow).where(AgentRow.id == "re"))
        with factory.begin() as s:
            save_world(s, "re", make_world(io, clock), retention=None)
            s.execute(sa.update(AgentRow).where(AgentRow.id == "re").values(created_at=created))

    with factory.begin() as s:
        save_world(s, "re", make_world("io1", 1000.0), {"stars": 5}, retention=None)
        save_world(s, "re", make_world("io2", 1001.0), retention=None)
    assert [h.io_id for h in _window(engine, "re")] == ["io2", "io1"]
    recreate("io3", 500.0, datetime(2020, 1, 1, tzinfo=UTC))  # epoch 1 < the memo's 2
    assert [h.io_id for h in _window(engine, "re")] == ["io3"]
    recreate("io4", 400.0, datetime(2021, 1, 1, tzinfo=UTC))  # epoch 1 = the memo's
    assert [h.io_id for h in _window(engine, "re")] == ["io4"]
    pool_memo.clear()


def test_a_signal_on_a_world_being_retired_waits_for_the_agent_not_a_lock_cycle(engine: Engine) -> None:
    """PostgreSQL: the record path holds the agent's lock and then deletes a world; a signal written on
    that world meanwhile must queue on the agent (taken first) rather than lock the world and then, by
    its trigger, wait for the agent — the cycle PostgreSQL breaks with a deadlock error."""
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite serialises writers: no row locks")
    factory = session_factory(engine)
    with factory.begin() as s:
        world = save_world(s, "dl", make_world("io1", 1000.0), retention=None).id
    errors: list[BaseException] = []
    results: list[object] = []

    def signal() -> None:
        try:
            with factory.begin() as s2:
                s2.execute(sa.text("SET LOCAL application_name = 'rsi-dl-signal'"))
                results.append(update_signals(s2, "dl", {"stars": 1}, world_id=world))
        except BaseException as exc:  # the assertion below reports it
            errors.append(exc)

    with factory.begin() as s1:
        s1.execute(sa.select(AgentRow.id).where(AgentRow.id == "dl").with_for_update())
        worker = threading.Thread(target=signal)
        worker.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the signal's transaction waits for a lock
            with engine.connect() as probe:
                waiting = probe.execute(sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'rsi-dl-signal' "
                    "AND wait_event_type = 'Lock'")).scalar_one()
            if waiting:
                break
            time.sleep(0.02)
        s1.execute(sa.delete(WorldRow).where(WorldRow.id == world))
    worker.join(60)
    assert not worker.is_alive() and errors == [] and results == [None]
