"""The round's shared trial slots (docs/algorithm/evolve.md#evaluation): a freed slot takes the waiting
job of the lowest priority first (smoke before evaluation trials), then in submission order."""

from __future__ import annotations

import threading

import pytest

from rsi_worker.evolve.slots import SMOKE, TRIAL, SlotPool


def test_a_freed_slot_takes_smoke_before_queued_trials_then_submission_order() -> None:
    started: list[str] = []
    gate = threading.Event()
    with SlotPool(1) as pool:
        first = pool.submit(gate.wait)  # holds the only slot until every other job is queued
        futures = [pool.submit(lambda n=n: started.append(n), TRIAL) for n in ("t1", "t2")]
        futures.append(pool.submit(lambda: started.append("smoke"), SMOKE))
        futures.append(pool.submit(lambda: started.append("t3"), TRIAL))
        gate.set()
        assert first.result() is True
        for f in futures:
            f.result()
    assert started == ["smoke", "t1", "t2", "t3"]


def test_results_in_input_order_and_errors_reach_the_caller() -> None:
    with SlotPool(3) as pool:
        assert pool.map(lambda x: x * x, [3, 1, 2]) == [9, 1, 4]
        with pytest.raises(ZeroDivisionError):
            pool.map(lambda x: 1 // x, [1, 0])
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(lambda: None)
    with pytest.raises(ValueError, match="size"):
        SlotPool(0)


def test_never_more_jobs_at_once_than_slots() -> None:
    lock, running, peak = threading.Lock(), [0], [0]
    release = threading.Event()

    def job() -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 2:
                release.set()
        release.wait()
        with lock:
            running[0] -= 1

    with SlotPool(2) as pool:
        for f in [pool.submit(job) for _ in range(6)]:
            f.result()
    assert peak[0] == 2
