"""The background WAL checkpoint of a file SQLite database (rsi_common/db/engine.py ``_Checkpointer``,
docs/performance/record-path.md): a commit starts its thread, and ``engine.dispose()`` ends it and
closes its connection before returning, so a caller may delete the database's directory at once (a
replay's scratch database in a temporary directory did fail with "Directory not empty" when the
thread recreated the write-ahead log during the removal)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import sqlalchemy as sa

from rsi_common.db.engine import make_engine


def _checkpointers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rsi-sqlite-checkpoint" and t.is_alive()]


def test_dispose_ends_the_checkpoint_thread_and_the_directory_can_go(tmp_path: Path) -> None:
    before = set(_checkpointers())
    for round_ in range(3):  # an engine used again after dispose() checkpoints again, and stops again
        where = tmp_path / f"db{round_}"
        where.mkdir()
        engine = make_engine(f"sqlite:///{where / 'x.db'}")
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE t (v INTEGER)"))
        for i in range(20):
            with engine.begin() as conn:
                conn.execute(sa.text("INSERT INTO t VALUES (:v)"), {"v": i})
        started = set(_checkpointers()) - before
        assert len(started) == 1  # the commits started one thread
        engine.dispose()
        assert not any(t.is_alive() for t in started)  # ended and joined before dispose() returned
        shutil.rmtree(where)  # nothing recreates a file in it
        assert not where.exists()
