"""The inline driver's wave gate (rsi_worker/consolidate/waves.py ``WaveGate``): a candidate's second
wave is handed to the pool once, at the first first-wave result that releases it or at the last one
(docs/performance/consolidation.md#trial-order)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rsi_worker.consolidate.waves import WaveGate, releases

FAILED = {"status": "ok", "result": {"passed": 0}}
PASSED = {"status": "ok", "result": {"passed": 1}}
MISSING = {"status": "missing", "result": {"error": "x"}}
CANCELLED = {"status": "cancelled", "result": {"reason": "cancelled before the replay"}}


def gate(first: int) -> tuple[WaveGate, list[int]]:
    fired: list[int] = []
    return WaveGate(first, lambda: fired.append(1)), fired


def test_what_releases_on_its_own() -> None:
    assert releases(PASSED) and releases(CANCELLED)
    assert not releases(FAILED) and not releases(MISSING) and not releases({"status": "error"})
    assert not releases({"status": "ok", "result": {"passed": "1"}})  # a malformed count is no evidence


def test_a_passed_criterion_releases_at_once_and_only_once() -> None:
    g, fired = gate(3)
    g.done(FAILED)
    assert fired == [] and not g.fired.is_set()
    g.done(PASSED)
    assert fired == [1] and g.fired.is_set()
    g.done(PASSED)
    assert fired == [1]


def test_a_failing_first_wave_releases_at_its_last_result() -> None:
    g, fired = gate(3)
    for result in (FAILED, MISSING):
        g.done(result)
    assert fired == []
    g.done(None)  # a member that raised is counted, and is no evidence
    assert fired == [1]


def test_a_cancelled_candidate_releases_its_wave_to_store_cancelled_rows() -> None:
    g, fired = gate(4)
    g.done(CANCELLED)
    assert fired == [1]


def test_an_empty_first_wave_releases_at_once() -> None:
    g, fired = gate(0)
    assert fired == [1] and g.fired.is_set()


def test_many_threads_release_once() -> None:
    g, fired = gate(16)
    results: list[Any] = [FAILED] * 8 + [PASSED] * 8
    threads = [threading.Thread(target=g.done, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fired == [1] and g.left == 0


def test_a_release_that_raises_still_marks_the_gate() -> None:
    def boom() -> None:
        raise RuntimeError("pool shut down")

    g = WaveGate(1, boom)
    with pytest.raises(RuntimeError):
        g.done(PASSED)
    assert g.fired.is_set() and g.released
