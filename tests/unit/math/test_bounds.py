"""Exact-bound early stop (docs/algorithm/formulas.md §2.10, docs/check-vectors.md §9.10)."""

from __future__ import annotations

import dataclasses

import pytest

from rsi_common.kinds import K_ENABLED_PRODUCTION, KINDS
from rsi_common.math import (
    FLOAT_GUARD,
    RRSIParams,
    can_stop_exactly,
    completed_status,
    early_stop_record_delta,
    invalid_but_hopeless,
    select_round,
    upper_lower,
)
from tests.unit.math.helpers import cand, ev_of, tr


def _walk(R0: int, trials: list[tuple[int, int] | None], S_star: float, delta: float,
          S_t: float) -> list[tuple[tuple[int, int, int], float, bool]]:
    """(A, B, R), Ŝ_max and the stop predicate after each trial; None = a missing trial."""
    A = B = 0
    R = R0
    out = []
    for trial in trials:
        if trial is not None:
            passed, w = trial
            A, B, R = A + passed, B + w, R - w
        out.append(((A, B, R), upper_lower(A, B, R)[0], can_stop_exactly(A, B, R, S_star, delta, S_t)))
    return out


def test_example_1_floor_equality_does_not_stop() -> None:
    steps = _walk(16, [(0, 1)] * 6, 0.75, 0.0625, 0.75)
    assert steps[4][0] == (0, 5, 11) and steps[4][1] == 0.6875 and not steps[4][2]
    assert steps[5][0] == (0, 6, 10) and steps[5][1] == 0.625 and steps[5][2]
    assert not any(stop for _, _, stop in steps[:5])
    assert early_stop_record_delta(0, 6, 10, 0.75) == -0.125
    inc = ev_of({f"w{i}": [1, 1] if i < 6 else [0, 0] for i in range(8)})
    partial = ev_of({f"w{i}": [0.0] for i in range(6)}, k=2)  # the six finished trials
    stopped = dataclasses.replace(partial, S=0.625)  # judged at Ŝ_max (docs/algorithm/formulas.md §2.10.5)
    _, (dec,) = select_round([cand("A", stopped)], inc, 0.75, 0.0625, RRSIParams(), dict.fromkeys(KINDS, 0),
                             tie="production", enabled=K_ENABLED_PRODUCTION, eps=1e-12)
    assert dec.reason_code == "floor" and dec.S == 0.625


def test_example_2_weighted_worlds_and_a_missing_trial() -> None:
    delta, s = 0.196061, 8 / 14
    steps = _walk(14, [(0, 3), (0, 2), (0, 3), (0, 2)], s, delta, s)
    assert [round(u, 6) for _, u, _ in steps] == [0.785714, 0.642857, 0.428571, 0.285714]
    assert [stop for _, _, stop in steps] == [False, False, False, True]
    assert round(early_stop_record_delta(*steps[-1][0], s), 6) == -0.285714
    steps = _walk(14, [(0, 3), (0, 2), None, (0, 2)], s, delta, s)
    assert steps[2][0] == (0, 5, 9) and steps[3][0] == (0, 7, 7) and steps[3][1] == 0.5
    assert not any(stop for _, _, stop in steps)


def test_example_3_s_t_binds() -> None:
    assert upper_lower(13, 20, 5)[0] == pytest.approx(0.72)
    assert not can_stop_exactly(13, 20, 5, 0.80, 0.02, 0.70)
    assert can_stop_exactly(12, 20, 5, 0.80, 0.02, 0.70)
    assert early_stop_record_delta(12, 20, 5, 0.70) == pytest.approx(-0.02)


def test_example_4_weights_two() -> None:
    steps = _walk(12, [(0, 2)] * 4, 0.5, 0.05, 0.5)
    assert steps[2][0] == (0, 6, 6) and steps[2][1] == 0.5 and not steps[2][2]
    assert steps[3][0] == (0, 8, 4) and steps[3][1] == pytest.approx(1 / 3) and steps[3][2]


def test_example_5_invalid_but_hopeless() -> None:
    inc = ev_of({"w1": [1, 1], "w2": [1, 1]})
    hopeless = ev_of({"w1": tr([0.0, 0.0], missing=1), "w2": tr([0.0, 0.0], missing=1)})
    assert hopeless.missing == 2 and hopeless.S == 0.0
    assert invalid_but_hopeless(0, 2, 2, 1.0, 0.25, 1.0)
    assert completed_status(hopeless, 0.15, 0, 2, 2, 1.0, 0.25, 1.0, hopeless_rule=True) == "measured"
    assert completed_status(hopeless, 0.15, 0, 2, 2, 1.0, 0.25, 1.0, hopeless_rule=False) == "eval_invalid"
    _, (dec,) = select_round([cand("A", hopeless)], inc, 1.0, 0.25, RRSIParams(), dict.fromkeys(KINDS, 0),
                             tie="production", enabled=K_ENABLED_PRODUCTION, eps=1e-12)
    assert dec.reason_code == "floor" and not dec.admissible
    passing = ev_of({"w1": tr([1.0, 0.0], missing=1), "w2": tr([0.0, 1.0], missing=1)})
    assert upper_lower(2, 2, 2)[0] == 1.0 and not invalid_but_hopeless(2, 2, 2, 1.0, 0.25, 1.0)
    assert completed_status(passing, 0.15, 2, 2, 2, 1.0, 0.25, 1.0, hopeless_rule=True) == "eval_invalid"
    valid = ev_of({"w1": [1, 1], "w2": [1, 0]})
    assert completed_status(valid, 0.15, 3, 4, 0, 1.0, 0.25, 1.0, hopeless_rule=False) == "measured"


def test_edges() -> None:
    assert upper_lower(0, 0, 0) == (0.0, 0.0)
    assert upper_lower(1, 2, 2) == (0.75, 0.25)
    assert upper_lower(2 + 1e-13, 2, 0)[0] == pytest.approx(1.0)  # within the 1e-12 slack
    assert FLOAT_GUARD == 1e-9
    for bad in ((3, 2, 1), (-1, 2, 1), (0, -1, 1), (0, 1, -1), (float("nan"), 1, 1), (0, float("inf"), 1)):
        with pytest.raises(ValueError):
            upper_lower(*bad)
    with pytest.raises(ValueError):
        can_stop_exactly(0, 6, 10, 0.75, 0.0625, 0.75, margin=-1)
    with pytest.raises(ValueError):
        can_stop_exactly(0, 6, 10, 0.75, -0.1, 0.75)
    with pytest.raises(ValueError):
        early_stop_record_delta(0, 6, 10, float("nan"))
    # margin 0 turns the floor-equality case of example 1 into a strict comparison only
    assert not can_stop_exactly(0, 5, 11, 0.75, 0.0625, 0.75, margin=0.0)
