"""Dream-RSI formulas (docs/algorithm/formulas.md §2.11, docs/check-vectors.md §9.9)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_common.math import (
    DEFAULT_BETA,
    BetaSweep,
    GridPlan,
    GridPlanningContext,
    LiveCycle,
    ReplayEpisode,
    SweepPoint,
    anytime_auc,
    assert_non_decreasing,
    clamp01,
    effective_sequential_rounds,
    episode_penalty,
    make_normalizer,
    mean_value,
    next_default_beta,
    parallel_penalty,
    pareto_auc_v1,
    pareto_reward,
    replay_value,
    select_policy,
    validate_grid,
)

ROOT = 0.40
SCORES = [0.40, 0.50, 0.62, 0.60, 0.30, 0.70, 0.55]  # root and every recorded cell
EP_A = ReplayEpisode("toy", 0.2, (1, 1, 1, 0), (0.50, 0.62, 0.60), ROOT, 3, 3, 2, 6, "policy_stop")
EP_B = ReplayEpisode("toy", 0.8, (2, 2, 0), (0.50, 0.30, 0.62, 0.70), ROOT, 4, 2, 2, 6, "policy_stop")
RAW = make_normalizer(SCORES, ROOT, "paper")
NORM = make_normalizer(SCORES, ROOT, "production")


def test_toy_world_raw_values() -> None:
    assert replay_value(EP_A, beta_cost=0.01, beta_par=0.02, norm=RAW) == pytest.approx(0.61, rel=1e-9)
    assert replay_value(EP_B, beta_cost=0.01, beta_par=0.02, norm=RAW) == pytest.approx(0.70, rel=1e-9)
    assert episode_penalty(EP_A) == 1.0 and episode_penalty(EP_B) == 0.5
    assert parallel_penalty([EP_A, EP_B]) == 0.75


def test_normaliser() -> None:
    assert NORM(0.62) == pytest.approx(0.733333, abs=1e-6)
    assert NORM(0.30) == 0.0 and NORM(0.40) == 0.0 and NORM(0.70) == 1.0 and NORM(0.9) == 1.0
    flat = make_normalizer([0.4, 0.3], 0.4, "production")
    assert (flat(0.4), flat(0.39), flat(0.5)) == (1.0, 0.0, 1.0)
    assert make_normalizer([], 0.4, "production")(0.4) == 1.0
    assert RAW(0.3) == 0.3
    with pytest.raises(ValueError):
        make_normalizer(SCORES, ROOT, "raw")
    with pytest.raises(ValueError):
        make_normalizer([float("nan")], ROOT, "production")


def test_pareto_auc_and_reward() -> None:
    pts = {"toy": [(3 / 6, NORM(0.62)), (4 / 6, NORM(0.70))]}
    auc = pareto_auc_v1(pts)
    assert auc == pytest.approx(0.455556, abs=1e-6)
    assert pareto_reward(auc, parallel_penalty([EP_A, EP_B]), 0.1) == pytest.approx(0.380556, abs=1e-6)
    assert pareto_auc_v1({}) == 0.0
    assert pareto_auc_v1({"a": [(0.0, 1.0)], "b": []}) == 0.5
    with pytest.raises(ValueError):
        pareto_auc_v1({"a": [(1.5, 0.2)]})
    with pytest.raises(ValueError):
        pareto_auc_v1({"a": [(0.5, float("nan"))]})
    with pytest.raises(ValueError):
        pareto_reward(0.5, 0.5, -0.1)


def test_anytime_auc() -> None:
    a = [(0, 0.0), (1, 1 / 3), (2, NORM(0.62)), (3, NORM(0.62))]
    b = [(0, 0.0), (2, 1 / 3), (4, 1.0)]
    assert anytime_auc(a, 6) == pytest.approx(0.544444, abs=1e-6)
    assert anytime_auc(b, 6) == pytest.approx(0.444444, abs=1e-6)
    assert anytime_auc(list(reversed(b)), 6) == anytime_auc(b, 6)
    assert anytime_auc([], 0) == 0.0 and anytime_auc(b, 0) == 1.0 and anytime_auc([], 6) == 0.0
    assert anytime_auc([(2, 1.0), (9, 0.5)], 4) == 0.5  # clipped at N_max; 0 before the first point
    with pytest.raises(ValueError):
        anytime_auc(b, -1)
    with pytest.raises(ValueError):
        anytime_auc([(-1, 0.5)], 6)


def test_default_evaluator_values() -> None:
    kwargs = {"beta_cost": 0.25 / 110, "beta_par": 0.05 / 2, "norm": NORM}
    assert replay_value(EP_A, **kwargs) == pytest.approx(0.751515, abs=1e-6)  # type: ignore[arg-type]
    assert replay_value(EP_B, **kwargs) == pytest.approx(1.040909, abs=1e-6)  # type: ignore[arg-type]


def test_replay_value_edges() -> None:
    empty = ReplayEpisode("w", 0.5, (), (), 0.4, 0, 0, 1, 0)
    assert replay_value(empty, beta_cost=0.1, beta_par=0.1, norm=RAW) == 0.4
    nothing = ReplayEpisode("w", 0.5, (), (), None, 0, 0, 1, 0)
    assert replay_value(nothing, beta_cost=0.1, beta_par=0.1, norm=RAW) == 0.0
    with pytest.raises(ValueError):
        replay_value(EP_A, beta_cost=-0.1, beta_par=0.0, norm=RAW)


def test_select_policy_and_non_decreasing() -> None:
    assert select_policy([0.61, 0.70], tie="paper") == 1
    assert select_policy([0.61, 0.70], tie="production") == 1
    near = [0.7, 0.7 + 5e-10]
    assert select_policy(near, tie="production", tol=1e-9) == 0 and select_policy(near, tie="paper") == 1
    assert select_policy([0.5, 0.9, 0.9], tie="production") == 1
    assert_non_decreasing([0.61, 0.70], 1)
    with pytest.raises(ValueError):
        assert_non_decreasing([0.70, 0.61], 1)
    with pytest.raises(ValueError):
        assert_non_decreasing([0.70], 3)
    for bad in ([], [0.1, float("nan")]):
        with pytest.raises(ValueError):
            select_policy(bad, tie="paper")
    with pytest.raises(ValueError):
        select_policy([0.1], tie="production", tol=-1e-9)
    with pytest.raises(ValueError):
        select_policy([0.1], tie="best")


@settings(max_examples=200, deadline=None)
@given(V=st.lists(st.floats(-5, 5), min_size=1, max_size=8), tie=st.sampled_from(["paper", "production"]),
       tol=st.sampled_from([0.0, 1e-9, 0.01, 0.5]))
def test_select_policy_never_below_incumbent(V: list[float], tie: str, tol: float) -> None:
    m = select_policy(V, tie=tie, tol=tol)
    assert V[m] >= V[0]
    assert V[m] >= max(V) - (tol if tie == "production" else 0.0)
    assert_non_decreasing(V, m)


def test_rounds_and_means() -> None:
    assert effective_sequential_rounds([3, 1, 0], 2) == 3
    assert effective_sequential_rounds([], 4) == 0 and effective_sequential_rounds([8], 4) == 2
    with pytest.raises(ValueError):
        effective_sequential_rounds([1], 0)
    with pytest.raises(ValueError):
        effective_sequential_rounds([-1], 2)
    assert mean_value([0.1, 0.2, 0.3]) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        mean_value([])
    with pytest.raises(ValueError):
        parallel_penalty([])
    assert clamp01(0.55000000000000004) == 0.55 and clamp01(1.3) == 1.0 and clamp01(-0.2) == 0.0
    with pytest.raises(ValueError):
        clamp01(float("nan"))


# --- next_default_beta --------------------------------------------------------------------------


def _cycles(bests: list[float], beta: float | list[float]) -> list[LiveCycle]:
    betas = beta if isinstance(beta, list) else [beta] * len(bests)
    return [LiveCycle(i, b, be) for i, (b, be) in enumerate(zip(bests, betas, strict=True))]


def test_next_default_beta_vectors() -> None:
    d = next_default_beta(_cycles([0.5, 0.6], 0.4), [])
    assert (d.beta, d.branch) == (DEFAULT_BETA, "default") and "insufficient" in d.reason
    d = next_default_beta(_cycles([0.5, 0.6, 0.7], 0.4), [])
    assert (d.beta, d.branch) == (0.4, "keep")
    plateau = _cycles([0.5, 0.5, 0.5], 0.4)
    sweep = BetaSweep(2, (SweepPoint(0.4, 0.5, 0.4, 0.3), SweepPoint(0.6, 0.6, 0.5, 0.35)))
    d = next_default_beta(plateau, [sweep])
    assert (d.beta, d.branch) == (0.55, "raise")
    high = _cycles([0.5, 0.5, 0.5], 0.8)
    sweep_hi = BetaSweep(2, (SweepPoint(0.8, 0.6, 0.8, 0.3), SweepPoint(0.6, 0.6, 0.5, 0.35)))
    d = next_default_beta(high, [sweep_hi])
    assert (d.beta, d.branch) == (0.65, "lower")
    d = next_default_beta(plateau, [BetaSweep(2, (SweepPoint(0.4, 0.5, 0.4, 0.3),))])
    assert (d.beta, d.branch) == (0.6, "default") and "inconclusive" in d.reason


def test_next_default_beta_other_branches() -> None:
    plateau = _cycles([0.5, 0.5, 0.5], 0.4)
    d = next_default_beta(plateau, [])
    assert (d.beta, d.branch) == (0.6, "default")
    # a sweep of another iteration, or an empty one, is not paired
    unpaired = [BetaSweep(1, (SweepPoint(0.6, 0.9, 0.5, 0.9),)), BetaSweep(2)]
    assert next_default_beta(plateau, unpaired).branch == "default"
    improving = _cycles([0.5, 0.6, 0.7], 0.4)
    conflict = BetaSweep(2, (SweepPoint(0.4, 0.5, 0.4, 0.3), SweepPoint(0.6, 0.5, 0.5, 0.4)))
    d = next_default_beta(improving, [conflict])
    assert (d.beta, d.branch) == (0.6, "default") and "conflict" in d.reason
    agree = BetaSweep(2, (SweepPoint(0.4, 0.5, 0.4, 0.3), SweepPoint(0.6, 0.4, 0.5, 0.4)))
    assert next_default_beta(improving, [agree]).branch == "keep"
    both = BetaSweep(2, (SweepPoint(0.8, 0.5, 0.8, 0.3), SweepPoint(1.0, 0.7, 0.9, 0.3),
                         SweepPoint(0.6, 0.5, 0.5, 0.2)))
    d = next_default_beta(_cycles([0.5, 0.5, 0.5], 0.8), [both])
    assert (d.branch, d.beta) == ("default", 0.6) and "conflict" in d.reason
    # lowering needs `window` high-beta cycles
    mixed = _cycles([0.5, 0.5, 0.5], [0.8, 0.4, 0.8])
    sweep_hi = BetaSweep(2, (SweepPoint(0.8, 0.6, 0.8, 0.3), SweepPoint(0.6, 0.6, 0.5, 0.35)))
    assert next_default_beta(mixed, [sweep_hi]).branch == "default"
    # cycles are sorted by iteration
    shuffled = list(reversed(_cycles([0.5, 0.6, 0.7], 0.4)))
    assert next_default_beta(shuffled, []).branch == "keep"
    assert next_default_beta(_cycles([0.5, 0.5, 0.5], 0.95), [BetaSweep(2, (
        SweepPoint(0.95, 0.5, 0.4, 0.3), SweepPoint(1.0, 0.6, 0.5, 0.35)))]).beta == 1.0  # clamped


def test_next_default_beta_bad_input() -> None:
    for kwargs in ({"step": 0.05}, {"step": 0.25}, {"window": 0}, {"near": float("nan")}):
        with pytest.raises(ValueError):
            next_default_beta([], [], **kwargs)


# --- validate_grid ------------------------------------------------------------------------------

CTX = GridPlanningContext(10, 19, 4, 4, 2, trace_branch_count=10, trace_refine_count=10)


def test_validate_grid() -> None:
    ok = validate_grid(GridPlan(10, 10), CTX, replay=True)
    assert (ok.valid, ok.in_support, ok.cells, ok.rewardable) == (True, True, 110, True) and ok.reasons == ()
    bad = validate_grid(GridPlan(11, 10), CTX, replay=True)
    assert not bad.valid and bad.cells == 0 and not bad.rewardable and len(bad.reasons) >= 1
    out = validate_grid(GridPlan(10, 12), CTX, replay=True)
    assert out.valid and not out.in_support and out.cells == 130 and not out.rewardable
    unknown = GridPlanningContext(10, 19, 4, 4, 2)
    assert not validate_grid(GridPlan(2, 1), unknown, replay=True).in_support
    live = validate_grid(GridPlan(10, 12), unknown, replay=False)
    assert live.in_support and live.rewardable
    both = validate_grid(GridPlan(0, -1), CTX, replay=False)
    assert not both.valid and len(both.reasons) == 2


# --- value type validation ----------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    {"n_revealed": 2}, {"rounds": -1}, {"N_max": -1}, {"W": 0}, {"batch_sizes": (1, -1)}, {"beta": 1.2},
    {"revealed_scores": (0.5, float("nan"), 0.6)}, {"curve": ((0, 0.1, 2),)}, {"curve": ((-1, 0.1),)},
])
def test_replay_episode_checks(kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {"world_id": "w", "beta": 0.5, "batch_sizes": (1, 1, 1),
                               "revealed_scores": (0.5, 0.6, 0.7), "root_score": 0.4, "n_revealed": 3,
                               "rounds": 3, "W": 2, "N_max": 6}
    base.update(kwargs)
    with pytest.raises(ValueError):
        ReplayEpisode(**base)  # type: ignore[arg-type]


def test_other_dream_type_checks() -> None:
    from rsi_common.math import BetaDecision
    bad_points: Any = ("x",)
    for call in (lambda: LiveCycle(1, 0.5, 1.5), lambda: SweepPoint(0.5, float("nan"), 0.1, 0.1),
                 lambda: BetaDecision(0.5, "sideways"), lambda: GridPlan(True, 1),
                 lambda: GridPlanningContext(10, 19, 0, 4, 2), lambda: BetaSweep(1, bad_points)):
        with pytest.raises(ValueError):
            call()
