"""Estimator (docs/algorithm/formulas.md §2.2, docs/check-vectors.md §9.2) and edit budget (§2.3, §9.1)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_common.math import (
    TaskResult,
    aggregate,
    check_edit_cardinality,
    delta_s,
    edit_budget,
    edit_budget_raw,
    relative_cost_change,
    valid_measurement,
)
from tests.unit.math.helpers import ev_of, tr

# --- docs/check-vectors.md §9.1 edit budget
# ---------------------------------------------------------------------------


def test_budget_20_1_4() -> None:
    assert [edit_budget(t, 20, 1, 4) for t in range(20)] == [4] * 8 + [3] * 5 + [2] * 7
    assert edit_budget(20, 20, 1, 4) == 1
    assert edit_budget_raw(19, 20, 1, 4) == pytest.approx(1.01847, abs=5e-6)
    assert edit_budget(19, 20, 1, 4) == 2


def test_budget_20_1_3_and_consolidation_clamp() -> None:
    assert [edit_budget(t, 20, 1, 3) for t in range(20)] == [3] * 10 + [2] * 10
    assert edit_budget_raw(10, 20, 1, 3) == 2.0
    assert [edit_budget(min(t, 20), 20, 1, 3) for t in (20, 21, 57, 10_000)] == [1, 1, 1, 1]
    assert edit_budget(25, 20, 1, 3) == 1  # t is clamped into [0, T]
    assert edit_budget(-5, 20, 1, 3) == 3


def test_budget_40_1_4() -> None:
    assert [edit_budget(t, 40, 1, 4) for t in range(40)] == [4] * 16 + [3] * 9 + [2] * 15


def test_budget_nine_decimal_rounding() -> None:
    raw = edit_budget_raw(2, 3, 1, 5)
    assert raw == 2.0000000000000004
    assert math.ceil(raw) == 3  # a bare ceiling would be wrong
    assert edit_budget(2, 3, 1, 5) == 2


def test_budget_non_positive_horizon_is_b_max() -> None:
    assert edit_budget(5, 0, 1, 4) == 4
    assert edit_budget_raw(5, 0, 1, 4) == 4.0
    assert edit_budget(0, -7, 2, 3) == 3


@pytest.mark.parametrize("args", [(1, 20, 0, 4), (1, 20, 3, 2), (float("nan"), 20, 1, 4), (1, 20, 1.5, 4),
                                  (1, 20.0, 1, 4)])
def test_budget_bad_input(args: tuple[float, float, float, float]) -> None:
    with pytest.raises(ValueError):
        edit_budget(*args)  # type: ignore[arg-type]


def test_check_edit_cardinality() -> None:
    assert check_edit_cardinality(0, 3) and check_edit_cardinality(3, 3)
    assert not check_edit_cardinality(4, 3) and not check_edit_cardinality(-1, 3)


@settings(max_examples=150, deadline=None)
@given(T=st.integers(1, 200), b_min=st.integers(1, 8), extra=st.integers(0, 8),
       t1=st.floats(-10, 250, allow_nan=False), t2=st.floats(-10, 250, allow_nan=False))
def test_budget_non_increasing_and_bounded(T: int, b_min: int, extra: int, t1: float, t2: float) -> None:
    b_max = b_min + extra
    lo, hi = sorted((t1, t2))
    b_lo, b_hi = edit_budget(lo, T, b_min, b_max), edit_budget(hi, T, b_min, b_max)
    assert b_lo >= b_hi
    assert b_min <= b_hi <= b_lo <= b_max


@settings(max_examples=50, deadline=None)
@given(T=st.integers(1, 120), b_min=st.integers(1, 5), extra=st.integers(0, 5))
def test_budget_sequence_over_a_run(T: int, b_min: int, extra: int) -> None:
    seq = [edit_budget(t, T, b_min, b_min + extra) for t in range(T + 1)]
    assert seq == sorted(seq, reverse=True)
    assert seq[0] == b_min + extra and seq[-1] == b_min


# --- docs/check-vectors.md §9.2 estimator
# -----------------------------------------------------------------------------


def test_estimator_basic() -> None:
    ev = ev_of({"a": tr([1, 0], tokens=[1000, 1000]), "b": tr([1, 1], tokens=[1000, 1000])}, k=2)
    assert (ev.S, ev.C, ev.n_expected, ev.missing) == (0.75, 1000.0, 4, 0)


def test_estimator_weights() -> None:
    ev = ev_of({"a": tr([0.5, 1.0], [10, 10]), "b": tr([0, 0], [90, 90])})
    assert pytest.approx(15 / 200, rel=1e-9) == ev.S


def test_estimator_cost_ignores_none_zero_and_bool() -> None:
    ev = ev_of({"a": tr([1, 1], tokens=[1000, None]), "b": tr([0, 0], tokens=[3000, 0])})
    assert ev.C == 2000.0
    assert ev_of({"a": tr([1, 1], tokens=[None, 0]), "b": tr([1])}).C is None
    assert ev_of({"a": tr([1, 1], tokens=[True, 500])}).C == 500.0
    assert ev_of({"a": tr([1, 1], tokens=[-5, 500.0])}).C == 500.0


def test_estimator_missing_and_validity() -> None:
    ev = ev_of({"a": tr([1.0, 0.0], missing=1)}, k=2)
    assert ev.S == 0.5 and ev.missing == 1 and ev.n_expected == 2
    assert valid_measurement(ev, 0.15) is False
    big = ev_of({f"w{i}": tr([1.0, 0.0] if i == 0 else [1.0, 1.0], missing=1 if i == 0 else 0)
                 for i in range(4)})
    assert big.n_expected == 8 and valid_measurement(big, 0.15)  # 1 <= 1.2


def test_estimator_zero_weight_and_empty_task() -> None:
    assert ev_of({"a": tr([1.0], [0.0])}).S == 0.0
    ev = ev_of({"a": tr([]), "b": tr([1.0, 1.0])})
    assert ev.S == 1.0 and ev.n_expected == 4
    assert tr([]).mean == 0.0 and tr([1, 0], [3, 1]).mean == 0.75


def test_estimator_extra_and_job_copied() -> None:
    extra = {"valid_rate": 1.0}
    ev = ev_of({"a": [1.0]}, k=1, job="incumbent", extra=extra)
    extra["valid_rate"] = 0.0
    assert ev.job == "incumbent" and ev.extra == {"valid_rate": 1.0}
    assert ev_of({"a": [1.0]}).extra == {}


def test_relative_cost_change() -> None:
    assert relative_cost_change(1500, 1000) == 0.5
    assert relative_cost_change(1500, None) == 0.0
    assert relative_cost_change(None, 1000) == 0.0
    assert relative_cost_change(1500, 0) == 0.0
    assert relative_cost_change(0, 1000) == 0.0
    assert relative_cost_change(500.0, 1000.0) == -0.5


def test_delta_s() -> None:
    assert delta_s(0.7, 0.5) == pytest.approx(0.2)
    assert delta_s(9 / 14, 8 / 14) == 0.07142857142857151


@pytest.mark.parametrize("call", [
    lambda: aggregate({}, 2),
    lambda: aggregate({"a": tr([1.0])}, 0),
    lambda: valid_measurement(ev_of({"a": [1.0]}), 1.5),
    lambda: relative_cost_change(-1.0, 1000),
    lambda: relative_cost_change(float("nan"), 1000),
    lambda: delta_s(float("nan"), 0.5),
    lambda: TaskResult((1.5,)),
    lambda: TaskResult((-0.1,)),
    lambda: TaskResult((float("nan"),)),
    lambda: TaskResult((1.0, 0.0), (1.0,)),
    lambda: TaskResult((1.0,), (-1.0,)),
    lambda: TaskResult((1.0,), (), (1.0, 2.0)),
    lambda: TaskResult((1.0,), (), (float("nan"),)),
    lambda: TaskResult((1.0,), (), ("many",)),  # type: ignore[arg-type]
    lambda: TaskResult((1.0,), missing=-1),
    lambda: TaskResult((0.0,), missing=2),
])
def test_estimator_bad_input(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]


_trial = st.tuples(st.floats(0, 1), st.floats(0, 50), st.one_of(st.none(), st.integers(-5, 5000)))
_task = st.lists(_trial, min_size=0, max_size=5)


def _task_result(trials: list[tuple[float, float, int | None]]) -> TaskResult:
    return TaskResult(tuple(r for r, _, _ in trials), tuple(w for _, w, _ in trials),
                      tuple(t for _, _, t in trials))


@settings(max_examples=150, deadline=None)
@given(tasks=st.lists(_task, min_size=1, max_size=6), data=st.data())
def test_estimate_in_unit_interval_and_missing_never_raises_it(
        tasks: list[list[tuple[float, float, int | None]]], data: st.DataObject) -> None:
    per = {f"x{i}": _task_result(t) for i, t in enumerate(tasks)}
    ev = aggregate(per, 2)
    assert 0.0 <= ev.S <= 1.0
    if ev.C is not None:
        assert ev.C > 0
    # turn one finished trial into a missing one (reward 0, same weight, no tokens)
    i = data.draw(st.integers(0, len(tasks) - 1))
    if tasks[i]:
        j = data.draw(st.integers(0, len(tasks[i]) - 1))
        changed = list(tasks[i])
        changed[j] = (0.0, changed[j][1], None)
        per2 = dict(per)
        per2[f"x{i}"] = dataclasses.replace(_task_result(changed), missing=1)
        assert aggregate(per2, 2).S <= ev.S
    # append a missing trial with a random weight
    w = data.draw(st.floats(0, 50))
    old = per[f"x{i}"]
    per3 = dict(per)
    per3[f"x{i}"] = TaskResult((*old.rewards, 0.0), (*old.weight_list(), w), (*old.token_list(), None),
                               old.missing + 1)
    ev3 = aggregate(per3, 2)
    assert ev3.S <= ev.S and ev3.missing == ev.missing + 1
