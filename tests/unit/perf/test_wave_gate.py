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


def test_the_inline_driver_sizes_the_first_wave_from_the_bound() -> None:
    from types import SimpleNamespace

    from rsi_common.coord import Bounds
    from rsi_worker.consolidate.evaluate import plan_candidate
    from rsi_worker.consolidate.inline import _first_wave
    from rsi_worker.consolidate.waves import first_wave

    checks = {"w1": [1, 2, 3], "w2": [1, 2], "w3": [1], "w4": [1]}
    slots = plan_candidate("B", list(checks), 2, checks=checks)
    bounds = Bounds(0, 0, 14, S_star=0.75, delta=0.05, S_t=0.75)

    def deps(read: Any, wave_s: float = 30.0) -> Any:
        return SimpleNamespace(params=SimpleNamespace(early_stop_wave_s=wave_s),
                               coord=SimpleNamespace(bound_progress=read, margin=1e-9))

    def boom(*_: Any) -> Any:
        raise ConnectionError("redis down")

    ctx = SimpleNamespace(run_id="r", early_stop=True, checks=checks)
    wave = first_wave(slots, checks, bounds, 1e-9)
    assert 0 < wave < len(slots)
    assert _first_wave(deps(lambda *_: (bounds, 0)), ctx, slots) == wave  # type: ignore[arg-type]
    # every slot at once: waves off, early stop off, no bound, an unreadable bound, the incumbent
    assert _first_wave(deps(lambda *_: (bounds, 0), 0.0), ctx, slots) == len(slots)  # type: ignore[arg-type]
    off = SimpleNamespace(run_id="r", early_stop=False, checks=checks)
    assert _first_wave(deps(lambda *_: (bounds, 0)), off, slots) == len(slots)  # type: ignore[arg-type]
    assert _first_wave(deps(lambda *_: (None, 0)), ctx, slots) == len(slots)  # type: ignore[arg-type]
    assert _first_wave(deps(boom), ctx, slots) == len(slots)  # type: ignore[arg-type]
    inc = plan_candidate("incumbent", list(checks), 2, checks=checks)
    assert _first_wave(deps(lambda *_: (bounds, 0)), ctx, inc) == len(inc)  # type: ignore[arg-type]
