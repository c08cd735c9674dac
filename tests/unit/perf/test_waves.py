"""Wave scheduling of a candidate's trials (rsi_worker/consolidate/waves.py)."""

from __future__ import annotations

from rsi_common.coord import Bounds
from rsi_common.math.bounds import can_stop_exactly
from rsi_worker.consolidate.evaluate import plan_candidate
from rsi_worker.consolidate.waves import await_first_wave, first_wave

CHECKS = {"w1": [1, 2, 3], "w2": [1, 2], "w3": [1], "w4": [1]}
SLOTS = plan_candidate("B", list(CHECKS), 2, checks=CHECKS)
R0 = sum(2 * len(c) for c in CHECKS.values())  # 14


def _bounds(A: int = 0, B: int = 0) -> Bounds:
    return Bounds(A, B, R0 - B, S_star=0.75, delta=0.05, S_t=0.75)


def test_first_wave_is_the_shortest_failing_prefix_that_stops() -> None:
    n = first_wave(SLOTS, CHECKS, _bounds(), 1e-9)
    weights = [len(CHECKS[s.world_id]) for s in SLOTS]
    stops = [can_stop_exactly(0, sum(weights[:i]), R0 - sum(weights[:i]), 0.75, 0.05, 0.75)
             for i in range(len(SLOTS) + 1)]
    assert stops[n] and not stops[n - 1] and 0 < n < len(SLOTS)
    # a bar no prefix reaches: every slot is in the first wave
    assert first_wave(SLOTS, CHECKS, Bounds(0, 0, R0, S_star=0.01, delta=0.0, S_t=0.01), 1e-9) == len(SLOTS)


def _wait(index: int, reads: list[tuple[Bounds | None, int]], stops: list[bool]) -> tuple[bool, int]:
    seen = {"reads": 0}

    def read() -> tuple[Bounds | None, int]:
        seen["reads"] += 1
        return reads[min(seen["reads"], len(reads)) - 1]

    answers = iter(stops)
    result = await_first_wave(SLOTS[index], [s.to_json() for s in SLOTS], CHECKS, read,
                              lambda: next(answers, False), poll_s=0.0)
    return result, seen["reads"]


def test_first_wave_trials_never_wait_and_the_second_wave_waits_for_a_decision() -> None:
    wave = first_wave(SLOTS, CHECKS, _bounds(), 1e-9)
    assert _wait(0, [(_bounds(), 0)], [False] * 5) == (False, 1)  # first wave: runs at once
    # second wave: keeps looking while undecided, then the candidate is cancelled → must not run
    assert _wait(wave, [(_bounds(), 0)] * 3, [False, False, True]) == (True, 3)
    # a first-wave trial passed a criterion: not hopeless, run
    assert _wait(wave, [(_bounds(), 1), (_bounds(A=1, B=3), 2)], [False] * 5) == (False, 2)
    # every first-wave slot counted without a stop: run
    assert _wait(wave, [(_bounds(), 0), (_bounds(B=2), wave)], [False] * 5) == (False, 2)
    # no bound stored (expired, or early stop off): run
    assert _wait(wave, [(None, 0)], [False]) == (False, 1)


def test_the_wait_is_bounded() -> None:
    wave = first_wave(SLOTS, CHECKS, _bounds(), 1e-9)
    result = await_first_wave(SLOTS[wave], [s.to_json() for s in SLOTS], CHECKS, lambda: (_bounds(), 0),
                              lambda: False, wait_s=0.0, poll_s=0.0)
    assert result is False
