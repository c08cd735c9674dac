"""``rsi bench ingest`` arithmetic: percentiles, latency statistics, statement kinds and counting,
statements per call, thread scaling and the ``--threads`` list (docs/performance/record-path.md)."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from rsi_worker.bench.ingest import (
    StatementCounter,
    parse_threads,
    per_call,
    percentile,
    scaling,
    statement_kind,
    stats_ms,
)


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile(list(reversed(values)), 0.01) == 1.0  # order of the input does not matter
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0 and percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert math.isnan(percentile([], 0.5))
    with pytest.raises(ValueError):
        percentile(values, 0.0)
    with pytest.raises(ValueError):
        percentile(values, 1.5)


def test_stats_ms_converts_seconds_and_uses_the_median_for_p50() -> None:
    assert stats_ms([]) == {"n": 0}
    stats = stats_ms([0.001, 0.002, 0.003, 0.010])
    assert stats == {"n": 4, "p50_ms": 2.5, "p99_ms": 10.0, "max_ms": 10.0, "mean_ms": 4.0}
    many = stats_ms([0.001] * 99 + [0.5])  # one slow call in a hundred is the p99
    assert many["p50_ms"] == 1.0 and many["p99_ms"] == 1.0 and many["max_ms"] == 500.0
    assert stats_ms([0.001] * 98 + [0.5] * 2)["p99_ms"] == 500.0


@pytest.mark.parametrize(("sql", "kind"), [
    ("BEGIN IMMEDIATE", "BEGIN IMMEDIATE"),
    ("INSERT INTO rsi_agents (id, frozen) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET turns = 1",
     "INSERT rsi_agents"),
    ("INSERT INTO rsi_worlds (id, seq) SELECT ?, coalesce(max(rsi_worlds.seq), 0) + 1 FROM rsi_worlds",
     "INSERT rsi_worlds"),
    ("UPDATE rsi_worlds SET enqueued_at=CURRENT_TIMESTAMP WHERE rsi_worlds.id IN (?)", "UPDATE rsi_worlds"),
    ("DELETE FROM rsi_trajectories WHERE rsi_trajectories.agent_id = ?", "DELETE rsi_trajectories"),
    ("SELECT rsi_worlds.id, rsi_worlds.seq \nFROM rsi_worlds \nWHERE rsi_worlds.io_id = ?",
     "SELECT rsi_worlds"),
    ("  insert into t values (1)", "INSERT t"),
    ("SAVEPOINT sa_1", "SAVEPOINT sa_1"),
])
def test_statement_kind(sql: str, kind: str) -> None:
    assert statement_kind(sql) == kind


def test_per_call_and_scaling() -> None:
    assert per_call(4010, 1000) == 4.01 and per_call(1, 3) == 0.333 and per_call(5, 0) is None
    runs = [{"threads": 1, "turns_per_s": 200.0}, {"threads": 8, "turns_per_s": 430.0},
            {"threads": 16, "turns_per_s": None}]
    assert scaling(runs) == {"1": 1.0, "8": 2.15, "16": None}
    assert scaling([]) == {}
    assert scaling([{"threads": 1, "turns_per_s": 0.0}, {"threads": 2, "turns_per_s": 5.0}]) == {"1": None,
                                                                                                   "2": None}


def test_parse_threads() -> None:
    assert parse_threads("1,8") == [1, 8]
    assert parse_threads(" 8 , 1 ,8") == [8, 1]
    assert parse_threads("4") == [4]
    for bad in ("", "0,8", "a", "1,-2"):
        with pytest.raises(ValueError):
            parse_threads(bad)


def test_the_statement_counter_counts_totals_kinds_and_each_thread(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'count.db'}")
    counter = StatementCounter(engine)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
            assert counter.thread_count() == 2
            seen: list[int] = []

            def other() -> None:
                with engine.connect() as c:
                    c.execute(sa.text("SELECT x FROM t"))
                seen.append(counter.thread_count())

            worker = threading.Thread(target=other)
            worker.start()
            worker.join()
            assert seen == [1] and counter.thread_count() == 2  # per thread
        assert counter.total == 3
        assert counter.kinds == {"CREATE TABLE": 1, "INSERT t": 1, "SELECT t": 1}
        counter.reset()
        assert counter.total == 0 and not counter.kinds
    finally:
        counter.close()
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
    assert counter.total == 0  # the listener is gone
    engine.dispose()
