"""The write turn among processes (rsi_common/db/engine.py ``_WriterFile``,
docs/performance/record-path.md#sqlite): engines on one SQLite file (each as another process would
hold it: its own open lock file) write one at a time, a waiter goes on as soon as the holder
commits, a turn not given within the busy timeout is a clear error, and the lock goes with its
holder's rollback."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from rsi_common.db import engine as engine_mod
from rsi_common.db import make_engine


def _engines(tmp_path: Path) -> tuple[sa.Engine, sa.Engine]:
    url = f"sqlite:///{tmp_path / 'rsi.db'}"
    a, b = make_engine(url), make_engine(url)
    with a.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (n INTEGER)")
    return a, b


def test_a_second_engine_writes_after_the_first_commits(tmp_path: Path) -> None:
    a, b = _engines(tmp_path)
    assert (tmp_path / "rsi.db-writer.lock").exists()
    order: list[str] = []
    began = threading.Event()

    def second() -> None:
        began.set()
        with b.begin() as conn:
            order.append("b begins")
            conn.exec_driver_sql("INSERT INTO t VALUES (2)")

    with a.begin() as conn:
        conn.exec_driver_sql("INSERT INTO t VALUES (1)")
        th = threading.Thread(target=second)
        th.start()
        began.wait()
        th.join(0.3)  # b waits for the turn, whatever the time given
        assert th.is_alive() and order == []
        order.append("a commits")
    th.join(30)
    assert order == ["a commits", "b begins"]
    with b.connect() as conn:
        assert [r[0] for r in conn.exec_driver_sql("SELECT n FROM t ORDER BY n")] == [1, 2]
    a.dispose()
    b.dispose()


def test_no_turn_within_the_busy_timeout_is_a_clear_error_and_a_rollback_frees_the_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _engines(tmp_path)
    monkeypatch.setattr(engine_mod, "SQLITE_BUSY_TIMEOUT_MS", 50)
    conn = a.connect()
    tx = conn.begin()
    conn.exec_driver_sql("INSERT INTO t VALUES (1)")
    with pytest.raises(sa.exc.OperationalError, match="database is locked"), b.begin():
        pass
    tx.rollback()
    conn.close()
    with b.begin() as c2:  # the turn went with the rollback
        c2.exec_driver_sql("INSERT INTO t VALUES (3)")
    with b.connect() as c3:
        assert [r[0] for r in c3.exec_driver_sql("SELECT n FROM t")] == [3]
    a.dispose()
    b.dispose()


def test_a_forked_child_opens_its_own_lock_file(tmp_path: Path) -> None:
    """An inherited open file shares the parent's lock; the child (another pid) opens the file anew,
    so the parent's held turn excludes it."""
    path = str(tmp_path / "rsi.db-writer.lock")
    parent = engine_mod._WriterFile(path)
    assert parent.acquire(deadline=0.0)
    child = engine_mod._WriterFile(path)
    child._fd, child._pid = parent._fd, -1  # as after fork: the parent's open file, another pid
    assert not child.acquire(deadline=0.0)  # opened its own file: the parent's turn holds
    assert child._fd != parent._fd
    parent.release()
    assert child.acquire(deadline=0.0)
    child.release()
