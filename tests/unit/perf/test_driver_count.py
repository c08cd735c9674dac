"""A write as driver SQL with its row count (``rsi_common.db.driver_count``; the quiet run's
compare-and-swap and insert, docs/performance/consolidation.md#the-no-signal-path): the count the
Core call gives, the engine's cursor events fired, a driver error raised as ``Connection.execute``
raises it."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from rsi_common.db import make_engine
from rsi_common.db.driver_count import run_count
from rsi_worker.bench.ingest import StatementCounter


def test_run_count_counts_like_core_fires_events_and_wraps_errors(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        counter = StatementCounter(engine)
        try:
            with engine.connect() as conn, conn.begin():
                assert run_count(conn, "INSERT INTO t (k, v) VALUES (?, ?)", (1, 10)) == 1
                assert run_count(conn, "INSERT INTO t (k, v) VALUES (?, ?) ON CONFLICT (k) DO NOTHING",
                                 (1, 11)) == 0
                assert run_count(conn, "INSERT INTO t (k, v) VALUES (?, ?)", (2, 20)) == 1
                assert run_count(conn, "UPDATE t SET v = v + 1 WHERE v >= ?", (10,)) == \
                    conn.execute(sa.text("SELECT count(*) FROM t WHERE v >= 11")).scalar_one() == 2
                with pytest.raises(sa_exc.IntegrityError) as err:
                    run_count(conn, "INSERT INTO t (k, v) VALUES (?, ?)", (3, None))
                assert isinstance(err.value.orig, engine.dialect.loaded_dbapi.Error)
            assert sum(counter.kinds.values()) >= 5
        finally:
            counter.close()
        with engine.connect() as conn:  # the failed insert is not stored; the rest committed
            assert conn.execute(sa.text("SELECT k, v FROM t ORDER BY k")).all() == [(1, 11), (2, 21)]
    finally:
        engine.dispose()
