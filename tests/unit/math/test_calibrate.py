"""Noise band δ (docs/algorithm/formulas.md §2.9, docs/check-vectors.md §9.3): bit-equal bootstrap with
random.Random(7)."""

from __future__ import annotations

import json
import math
import random

import pytest

from rsi_common.math import DEFAULT_REPS, DEFAULT_SEED, Calibration, EvalResult, calibrate, pooled
from rsi_common.math.calibrate import bootstrap_se
from tests.unit.math.helpers import ev_of, tr


def _unit(ev: EvalResult) -> float:
    return 1 / max(1, sum(sum(t.weight_list()) for t in ev.per_task.values()))


EV_A = ev_of({"a": [1, 0], "b": [1, 1]})
EV_W = ev_of({"w1": tr([1, 0], [1, 1]), "w2": tr([0.5, 0.5], [2, 2]), "w3": tr([1, 1], [1, 1]),
              "w4": tr([1 / 3, 2 / 3], [3, 3])})
EV_ZERO = ev_of({f"w{i}": [1, 1] if i < 6 else [0, 0] for i in range(8)})
ROWS_8 = [[1, 0], [1, 1], [1, 1], [0, 1], [1, 1], [1, 1], [0, 0], [1, 0]]
EV_8 = ev_of({f"w{i}": r for i, r in enumerate(ROWS_8)})
EV_40 = ev_of({f"t{i}": [i % 2, (i + 1) % 2] for i in range(40)})


@pytest.mark.parametrize(("ev", "S", "se", "delta", "cons_delta", "reps"), [
    (EV_A, 0.75, 0.175524, 0.496455, None, 2000),
    (EV_W, 8 / 14, 0.069318, 0.196061, 0.196061, 2000),
    (EV_ZERO, 0.75, 0.0, 0.0, 0.0625, 2000),
    (EV_8, 0.6875, 0.076749, 0.217079, 0.217079, 2000),
    (EV_40, 0.5, 0.05469, 0.154687, None, 300),
])
def test_noise_band_vectors(ev: EvalResult, S: float, se: float, delta: float, cons_delta: float | None,
                            reps: int) -> None:
    assert pytest.approx(S, rel=1e-9) == ev.S
    assert round(bootstrap_se(ev, reps, random.Random(7)), 6) == se
    assert round(bootstrap_se(ev, reps), 6) == se  # default rng = Random(seed=7)
    cal = calibrate([ev], reps=reps)
    assert (cal.se_bootstrap, cal.delta) == (se, delta)
    assert cal.delta == round(2 * math.sqrt(2) * bootstrap_se(ev, reps, random.Random(7)), 6)
    assert cal.method.startswith("bootstrap") and cal.sd_null is None
    assert cal.S_per_eval is None and cal.max_abs_diff is None
    assert cal.n_evals == 1 and cal.k == 2 and cal.n_tasks == len(ev.per_task)
    assert cal.S_base == round(S, 6)
    if cons_delta is not None:
        assert max(cal.delta, _unit(ev)) == cons_delta


def test_constants() -> None:
    assert (DEFAULT_SEED, DEFAULT_REPS) == (7, 2000)


def test_two_base_evaluations() -> None:
    # "any per-task data": only the two scores matter for sd_null
    e1 = EvalResult("b1", 2, ev_of({"a": [1, 0], "b": [0, 1]}).per_task, 0.5, None, 4, 0)
    e2 = EvalResult("b2", 2, EV_A.per_task, 0.55, 1000.0, 4, 0)
    cal = calibrate([e1, e2])
    assert cal.sd_null == pytest.approx(0.05, rel=1e-9)
    assert cal.delta == pytest.approx(0.1, rel=1e-9)
    assert cal.method == "repeated base evaluations"
    assert cal.max_abs_diff == pytest.approx(0.05, rel=1e-9)
    assert cal.S_per_eval == (0.5, 0.55) and cal.n_evals == 2


def test_identical_repeated_scores_fall_back_to_bootstrap() -> None:
    cal = calibrate([EV_8, EV_8])
    assert cal.sd_null == 0.0 and cal.method.startswith("bootstrap")
    pool = pooled([EV_8, EV_8])
    se = bootstrap_se(pool, 2000, random.Random(7))
    sd_boot = math.sqrt(2) * se * math.sqrt(pool.k / EV_8.k)
    assert cal.delta == round(2 * sd_boot, 6) and cal.sd_null_bootstrap == round(sd_boot, 6)


def test_pooled_concatenates_per_task() -> None:
    e1 = ev_of({"a": tr([1, 0], tokens=[100, None]), "b": [1, 1]}, k=2)
    e2 = ev_of({"b": tr([0.5], [2.0], missing=0), "c": tr([0.0], missing=1)}, k=1)
    p = pooled([e1, e2])
    assert list(p.per_task) == ["a", "b", "c"] and p.k == 3 and p.job == "pooled"
    assert p.per_task["b"].rewards == (1.0, 1.0, 0.5) and p.per_task["b"].weights == (1.0, 1.0, 2.0)
    assert p.per_task["a"].tokens == (100, None) and p.per_task["b"].tokens == ()
    assert p.missing == 1 and p.n_expected == 9


def test_bootstrap_edge_cases() -> None:
    assert bootstrap_se(EV_A, 1) == 0.0 and bootstrap_se(EV_A, 0) == 0.0
    only_empty = ev_of({"a": [], "b": [1.0]}, k=1)
    assert bootstrap_se(only_empty, 50) == 0.0
    with pytest.raises(ValueError):
        bootstrap_se(EV_A, -1)


@pytest.mark.parametrize("call", [lambda: calibrate([]), lambda: pooled([]),
                                  lambda: calibrate([EV_A], z=-1.0),
                                  lambda: calibrate([EV_A], z=float("nan"))])
def test_calibrate_bad_input(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]


def test_calibration_json_round_trip() -> None:
    for cal in (calibrate([EV_A]), calibrate([EV_A, EV_8], reps=50)):
        d = json.loads(json.dumps(cal.to_json()))
        assert Calibration.from_json(d) == cal
