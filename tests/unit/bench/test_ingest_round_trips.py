"""``rsi bench ingest``'s like-with-like counts (rsi_worker/bench/ingest.py,
docs/performance/record-path.md#statements-per-call): statements leave transaction control out on
every backend (SQLite's ``BEGIN IMMEDIATE`` is emitted through SQLAlchemy, PostgreSQL's ``BEGIN`` by
the driver); round trips add one ``BEGIN`` and one ``COMMIT``/``ROLLBACK`` per transaction and the
pre-pings."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from rsi_common.db import make_engine
from rsi_worker.bench.ingest import StatementCounter


def test_statements_leave_begin_out_and_round_trips_count_each_transaction(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'trips.db'}")  # emits BEGIN IMMEDIATE itself
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    counter = StatementCounter(engine)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
            conn.execute(sa.text("INSERT INTO t VALUES (2)"))
        assert counter.thread_statements() == 2 and counter.thread_count() == 3
        with pytest.raises(ZeroDivisionError), engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (3)"))
            raise ZeroDivisionError
        assert counter.total == 5 and counter.kinds["BEGIN IMMEDIATE"] == 2
        assert counter.statements == 3  # the three INSERTs; no BEGIN, as PostgreSQL's is never seen
        assert dict(counter.transactions) == {"begin": 2, "commit": 1, "rollback": 1}
        assert counter.round_trips == 3 + 2 + 2  # no pre-ping on SQLite
        counter.reset()
        assert counter.statements == counter.round_trips == 0 and not counter.transactions
    finally:
        counter.close()
    with engine.begin() as conn:
        conn.execute(sa.text("SELECT 1"))
    assert counter.round_trips == 0  # every listener is gone
    engine.dispose()


def test_a_pre_ping_engine_counts_one_round_trip_per_checkout(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'ping.db'}", pool_pre_ping=True)
    counter = StatementCounter(engine)
    try:
        for _ in range(3):
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        assert counter.transactions["ping"] == 3 and counter.statements == 3
    finally:
        counter.close()
        engine.dispose()
