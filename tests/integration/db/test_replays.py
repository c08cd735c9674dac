"""Replay-trial rows: insert-if-absent on (run, candidate, world, trial)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db import ReplayRow, ensure_agent, get_replay_row, replay_rows, save_replay_row, start_run
from rsi_common.errors import InvalidInput


@pytest.fixture
def run_id(factory: sessionmaker[Session]) -> str:
    with factory.begin() as s:
        ensure_agent(s, "a1")
        return start_run(s, "a1", fence=1, io_id="io1").id


def test_duplicate_insert_returns_the_first_row(factory: sessionmaker[Session], run_id: str) -> None:
    with factory.begin() as s:
        row, created = save_replay_row(s, run_id, "A", "w_1", 0, status="ok", reward=0.5, weight=2.0,
                                       tokens=120, result={"answer": "x", "verdicts": [True, False]})
        assert created and (row.reward, row.weight, row.tokens, row.source) == (0.5, 2.0, 120, "replay")
    with factory.begin() as s:
        dup, created = save_replay_row(s, run_id, "A", "w_1", 0, status="missing", reward=0.0, weight=2.0)
        assert not created
        assert (dup.id, dup.status, dup.reward, dup.result) == (
            row.id, "ok", 0.5, {"answer": "x", "verdicts": [True, False]})
        assert s.scalar(sa.select(sa.func.count()).select_from(ReplayRow)) == 1


def test_concurrent_duplicates_store_one_row(factory: sessionmaker[Session], run_id: str) -> None:
    barrier = threading.Barrier(8)

    def work(i: int) -> tuple[int, bool]:
        barrier.wait()
        with factory.begin() as s:
            row, created = save_replay_row(s, run_id, "B", "w_2", 1, status="ok", reward=float(i), weight=1.0)
            return row.id, created

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    assert len({rid for rid, _ in results}) == 1
    assert sum(created for _, created in results) == 1


def test_rows_by_run_in_insertion_order(factory: sessionmaker[Session], run_id: str) -> None:
    slots = [("incumbent", "w_b", 0, "recorded"), ("incumbent", "w_a", 1, "cached"),
             ("A", "w_a", 0, "replay"), ("A", "w_b", 0, "replay")]
    with factory.begin() as s:
        for cand, world, trial, source in slots:
            save_replay_row(s, run_id, cand, world, trial, status="ok", source=source)
        save_replay_row(s, run_id, "A", "w_c", 0, status="cancelled")
    with factory.begin() as s:
        assert [(r.candidate, r.world_id, r.trial, r.source) for r in replay_rows(s, run_id)][:4] == slots
        assert [r.world_id for r in replay_rows(s, run_id, "A")] == ["w_a", "w_b", "w_c"]
        assert replay_rows(s, "run_other") == []
        assert get_replay_row(s, run_id, "A", "w_c", 0) is not None
        assert get_replay_row(s, run_id, "A", "w_c", 1) is None


def test_bad_rows_are_refused(factory: sessionmaker[Session], run_id: str) -> None:
    with factory.begin() as s:
        with pytest.raises(InvalidInput):
            save_replay_row(s, run_id, "A", "w", 0, status="done")
        with pytest.raises(InvalidInput):
            save_replay_row(s, run_id, "A", "w", 0, status="ok", source="guess")
        with pytest.raises(InvalidInput):
            save_replay_row(s, run_id, "A", "w", -1, status="ok")
