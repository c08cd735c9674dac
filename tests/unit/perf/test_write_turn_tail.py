"""What a SQLite write turn holds (docs/performance/record-path.md#the-loadtest-tail): no garbage
collection starts under it, the in-band join's read takes none, the record path's statements are
compiled before the first one."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from rsi_common.db import make_engine, upgrade
from rsi_common.db import record as record_mod
from rsi_worker.consolidate.join import ready_step
from tests.support.pipeline import Stack
from tests.unit.perf.conftest import incumbent_trials_stored


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_no_collection_starts_under_a_write_turn(tmp_path: Path, collector_on: None) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'a.db'}")
    other = make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        with engine.begin() as conn:  # BEGIN IMMEDIATE: the write turn
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
            assert not gc.isenabled()
            with other.begin() as conn2:  # a second engine's turn in the same process
                conn2.exec_driver_sql("SELECT 1")
                assert not gc.isenabled()
            assert not gc.isenabled()  # the first turn is still held
        assert gc.isenabled()
        with pytest.raises(RuntimeError), engine.begin() as conn:  # a rollback ends the pause too
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
            raise RuntimeError("boom")
        assert gc.isenabled()
        with engine.connect().execution_options(sqlite_begin="DEFERRED") as conn:  # no turn: no pause
            conn.exec_driver_sql("SELECT count(*) FROM t")
            assert gc.isenabled()
            conn.commit()
        gc.disable()  # the application's own choice is kept
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO t VALUES (2)")
        assert not gc.isenabled()
    finally:
        engine.dispose()
        other.dispose()


def test_the_in_band_join_takes_no_write_turn(stack: Stack) -> None:
    run_id = incumbent_trials_stored(stack)
    begins: list[str] = []
    engine = stack.engine

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("BEGIN"):
            begins.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        assert ready_step(stack.deps, run_id) == "after_incumbent"
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert begins == ["BEGIN DEFERRED"]


def test_the_record_statements_are_compiled_before_the_first_write(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        upgrade(engine)
        record_mod._plain_cache.pop(engine.dialect, None)
        assert record_mod.warm_record_path(engine)
        assert set(record_mod._plain_cache[engine.dialect]) >= {"upsert", "world", "retain_worlds"}
        unreachable = make_engine(f"sqlite:///file:{tmp_path / 'missing.db'}?mode=ro&uri=true")
        assert not record_mod.warm_record_path(unreachable)  # left to the first transaction
        unreachable.dispose()
    finally:
        engine.dispose()
