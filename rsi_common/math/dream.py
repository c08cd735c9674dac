"""Dream-RSI formulas (Dream-RSI Eq.1; docs/algorithm/formulas.md §2.11) and the Dream value types.

``beta_cost`` is Dream-RSI Eq.1's β1 (cost per revealed node), ``beta_par`` its β2 (parallelism
bonus); ``beta`` without suffix is the exploration policy's own knob β ∈ [0, 1].
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

from rsi_common.errors import InvalidInput
from rsi_common.math import _validate as v
from rsi_common.math.dream_types import (
    BETA_BRANCHES,
    BetaDecision,
    BetaSweep,
    GridPlan,
    GridPlanningContext,
    GridValidity,
    LiveCycle,
    ReplayEpisode,
    SweepPoint,
)

__all__ = [
    "BETA_BRANCHES",
    "DEFAULT_BETA",
    "BetaDecision",
    "BetaSweep",
    "GridPlan",
    "GridPlanningContext",
    "GridValidity",
    "LiveCycle",
    "Normalizer",
    "ReplayEpisode",
    "SweepPoint",
    "anytime_auc",
    "assert_non_decreasing",
    "clamp01",
    "effective_sequential_rounds",
    "episode_penalty",
    "make_normalizer",
    "mean_value",
    "next_default_beta",
    "parallel_penalty",
    "pareto_auc_v1",
    "pareto_reward",
    "replay_value",
    "select_policy",
    "validate_grid",
]

DEFAULT_BETA = 0.6
"""The default exploration β (and the fallback of :func:`next_default_beta`)."""

Normalizer = Callable[[float], float]


def clamp01(x: float) -> float:
    """``round(min(1, max(0, x)), 9)``."""
    return round(min(1.0, max(0.0, v.number("x", x))), 9)


def make_normalizer(scores_in_world: Sequence[float], baseline: float, mode: str) -> Normalizer:
    """The score map of one world: identity (paper) or s̃ ∈ [0, 1] (production).

    Production: ``ceil = max(scores_in_world)`` (``baseline`` if empty); if ``ceil − baseline ≤ 0``
    then ``s ↦ 1.0 if s ≥ baseline else 0.0``, else ``s ↦ clip((s − baseline)/(ceil − baseline), 0, 1)``.
    The baseline is the world's root score; ``scores_in_world`` are all its recorded scores.

    Raises:
        InvalidInput: unknown mode, or a NaN score/baseline (also when the map is applied).
    """
    base = v.finite("baseline", baseline)
    scores = [v.finite("scores_in_world", s) for s in scores_in_world]
    if mode == "paper":
        return lambda s: v.number("score", s)
    if mode != "production":
        raise InvalidInput(f"unknown mode {mode!r}; expected paper or production")
    top = max(scores) if scores else base
    span = top - base
    if span <= 0:
        return lambda s: 1.0 if v.number("score", s) >= base else 0.0
    return lambda s: min(1.0, max(0.0, (v.number("score", s) - base) / span))


def replay_value(ep: ReplayEpisode, *, beta_cost: float, beta_par: float, norm: Normalizer) -> float:
    """Dream-RSI Eq.1: ``V = best − beta_cost·N + beta_par·N / max(1, k★)``.

    ``best = max({norm(s) : s revealed} ∪ {norm(root)})``; with neither a revealed score nor a root
    score it is 0.0. N = ``ep.n_revealed``, k★ = ``ep.rounds``.

    Raises:
        InvalidInput: a negative or non-finite ``beta_cost`` / ``beta_par``.
    """
    cost = v.non_negative("beta_cost", beta_cost)
    par = v.non_negative("beta_par", beta_par)
    values = [norm(s) for s in ep.revealed_scores]
    if ep.root_score is not None:
        values.append(norm(ep.root_score))
    best = max(values) if values else 0.0
    n = ep.n_revealed
    return best - cost * n + par * n / max(1, ep.rounds)


def mean_value(values: Sequence[float]) -> float:
    """``fsum(values) / len(values)``; empty or NaN → ``InvalidInput``."""
    if not values:
        raise InvalidInput("mean_value: no values")
    return math.fsum(v.number("value", x) for x in values) / len(values)


def select_policy(V: Sequence[float], *, tie: str, tol: float = 0.0) -> int:
    """Index of the selected policy version (index 0 = the incumbent π⁰).

    ``"paper"``: first index of the maximum (``tol`` ignored). ``"production"``: first index m with
    ``V[m] ≥ max(V) − tol``, so π⁰ wins near-ties. Never returns a version worth less than V[0].

    Raises:
        InvalidInput: empty ``V``, a NaN value, ``tol`` negative/NaN, or an unknown ``tie``.
    """
    if not V:
        raise InvalidInput("select_policy: no versions")
    vals = [v.number(f"V[{i}]", x) for i, x in enumerate(V)]
    tol = v.non_negative("tol", tol)
    top = max(vals)
    if tie == "paper":
        return vals.index(top)
    if tie == "production":
        return next(i for i, x in enumerate(vals) if x >= top - tol)
    raise InvalidInput(f"unknown tie rule {tie!r}; expected paper or production")


def assert_non_decreasing(V: Sequence[float], m_star: int) -> None:
    """Raise unless ``V[m★] ≥ V[0]``: selection never loses to π⁰ on replay.

    Raises:
        InvalidInput: the invariant fails, ``V`` is empty or ``m★`` is out of range (explicit raise,
            not ``assert``, so it also holds under ``python -O``).
    """
    v.integer("m_star", m_star, 0)
    if m_star >= len(V):
        raise InvalidInput(f"m_star {m_star} out of range for {len(V)} versions")
    if not v.number("V[m_star]", V[m_star]) >= v.number("V[0]", V[0]):
        raise InvalidInput(f"selected version {m_star} (V={V[m_star]}) is worth less than the incumbent "
                           f"(V={V[0]})")


def effective_sequential_rounds(batch_sizes: Sequence[int], W: int) -> int:
    """k_eff = Σ_{b > 0} ceil(b / W): sequential rounds with at most W cells in flight.

    Raises:
        InvalidInput: ``W < 1`` or a negative batch size.
    """
    v.integer("W", W, 1)
    total = 0
    for i, b in enumerate(batch_sizes):
        if v.integer(f"batch_sizes[{i}]", b, 0) > 0:
            total += -(-b // W)
    return total


def episode_penalty(ep: ReplayEpisode) -> float:
    """``effective_sequential_rounds(batch_sizes, W) / max(1, N)``: 1 serial, → 1/W for full batches."""
    return effective_sequential_rounds(ep.batch_sizes, ep.W) / max(1, ep.n_revealed)


def parallel_penalty(episodes: Sequence[ReplayEpisode]) -> float:
    """fsum-mean of the episode penalties; empty → ``InvalidInput``."""
    if not episodes:
        raise InvalidInput("parallel_penalty: no episodes")
    return math.fsum(episode_penalty(ep) for ep in episodes) / len(episodes)


def _world_area(world: str, points: Sequence[tuple[float, float]]) -> float:
    pts = []
    for i, point in enumerate(points):
        u, q = v.number(f"{world}[{i}].u", point[0]), v.number(f"{world}[{i}].q", point[1])
        if not 0.0 <= u <= 1.0:
            raise InvalidInput(f"{world}[{i}]: work fraction u must lie in [0, 1], got {u}")
        pts.append((u, q))
    breaks = sorted({0.0, 1.0, *(u for u, _ in pts)})
    parts = []
    for a, b in itertools.pairwise(breaks):
        reached = [q for u, q in pts if u <= a]
        parts.append((max(reached) if reached else 0.0) * (b - a))
    return math.fsum(parts)


def pareto_auc_v1(points_by_world: Mapping[str, Sequence[tuple[float, float]]]) -> float:
    """Mean over worlds of the area under the attainment-vs-work frontier.

    Per world, points (u, q) with u = N/N_max ∈ [0, 1] and q = the episode's best s̃; breakpoints =
    sorted distinct {0, 1} ∪ {u}; on each [a, b) the value is ``max{q : u ≤ a}`` (0.0 if none);
    area = fsum(value·(b − a)). The mean over worlds is an fsum-mean (project decision); ``{}`` → 0.0.

    Raises:
        InvalidInput: u outside [0, 1] or a NaN u/q.
    """
    if not points_by_world:
        return 0.0
    areas = [_world_area(str(w), pts) for w, pts in points_by_world.items()]
    return math.fsum(areas) / len(areas)


def pareto_reward(auc: float, penalty: float, lam: float) -> float:
    """``auc − λ·penalty``.

    Raises:
        InvalidInput: NaN/infinite values or a negative λ (a weight; project decision).
    """
    return v.finite("auc", auc) - v.non_negative("lam", lam) * v.finite("penalty", penalty)


def anytime_auc(curve: Sequence[tuple[float, float]], N_max: float) -> float:
    """Normalised area under a best-so-far curve of (probes, value) points.

    Points are sorted by probes (stable). ``N_max = 0`` → the value of the last point (0.0 if none).
    Otherwise each point's value holds from its probe count to the next point's (the last one to
    ``N_max``), clipped at ``N_max``, and the integral is divided by ``N_max``; the value before the
    first point is 0.

    Raises:
        InvalidInput: ``N_max < 0``, a negative probe count, or a NaN.
    """
    n_max = v.non_negative("N_max", N_max)
    pts = []
    for i, point in enumerate(curve):
        probes = v.number(f"curve[{i}].probes", point[0])
        if probes < 0:
            raise InvalidInput(f"curve[{i}]: negative probe count {probes}")
        pts.append((probes, v.number(f"curve[{i}].value", point[1])))
    pts.sort(key=lambda p: p[0])
    if n_max == 0:
        return pts[-1][1] if pts else 0.0
    parts = []
    for i, (p, val) in enumerate(pts):
        end = pts[i + 1][0] if i + 1 < len(pts) else n_max
        parts.append(val * (min(end, n_max) - min(p, n_max)))
    return math.fsum(parts) / n_max


def _decision(beta: float, branch: str, reason: str) -> BetaDecision:
    return BetaDecision(beta, branch, reason)


def _paired_sweep(sweeps: Sequence[BetaSweep], iteration: int) -> BetaSweep | None:
    found = None
    for s in sweeps:
        if s.iteration == iteration and s.points:
            found = s
    return found


def next_default_beta(live: Sequence[LiveCycle], sweeps: Sequence[BetaSweep], *, step: float = 0.15,
                      plateau_delta: float = 0.0, window: int = 2, near: float = 0.2, high_beta: float = 0.6,
                      sweep_margin: float = 0.0) -> BetaDecision:
    """The default β of the next live cycle (docs/algorithm/formulas.md §2.11, steps 1–7).

    Improving (best score gained more than ``plateau_delta`` over ``window`` cycles) keeps β unless
    the paired sweep shows a nearby β with better reward and no worse attainment (conflict →
    default). On a plateau, sweep evidence raises β (better attainment, no worse reward at a higher
    β) or lowers it (only after ``window`` high-β cycles: no worse attainment for less work at a lower
    β); both or neither → default.

    Raises:
        InvalidInput: ``step ∉ [0.1, 0.2]``, ``window < 1``, or a NaN threshold.
    """
    step = v.finite("step", step)
    if not 0.1 <= step <= 0.2:
        raise InvalidInput(f"step must lie in [0.1, 0.2], got {step}")
    v.integer("window", window, 1)
    for name, x in (("plateau_delta", plateau_delta), ("near", near), ("high_beta", high_beta),
                    ("sweep_margin", sweep_margin)):
        v.finite(name, x)
    cycles = sorted(live, key=lambda c: c.iteration)
    if len(cycles) < window + 1:
        return _decision(DEFAULT_BETA, "default",
                         f"insufficient history ({len(cycles)} cycles, need {window + 1})")
    last = cycles[-1]
    beta_prev = last.beta
    gain = last.best_score - cycles[-1 - window].best_score
    improving = gain > plateau_delta
    sweep = _paired_sweep(sweeps, last.iteration)
    if sweep is None:
        if improving:
            return _decision(beta_prev, "keep", f"improving (gain {gain:+.4f}); no paired sweep")
        return _decision(DEFAULT_BETA, "default", f"plateau (gain {gain:+.4f}); no paired sweep")
    points = sweep.points
    ref_i = min(range(len(points)), key=lambda i: abs(points[i].beta - beta_prev))
    ref = points[ref_i]
    others = [p for i, p in enumerate(points) if i != ref_i]
    if improving:
        conflict = any(abs(p.beta - beta_prev) <= near and p.reward > ref.reward + sweep_margin
                       and p.attainment >= ref.attainment for p in others)
        if conflict:
            return _decision(DEFAULT_BETA, "default", "conflict: improving, but a nearby beta sweeps better")
        return _decision(beta_prev, "keep", f"improving (gain {gain:+.4f}); sweep agrees")
    raise_ev = any(p.beta > ref.beta and p.attainment > ref.attainment + sweep_margin
                   and p.reward >= ref.reward for p in points)
    high = all(c.beta >= high_beta for c in cycles[-window:])
    lower_ev = high and any(p.beta < ref.beta and p.attainment >= ref.attainment - sweep_margin
                            and p.work < ref.work for p in points)
    if raise_ev and lower_ev:
        return _decision(DEFAULT_BETA, "default", "conflict: sweep supports both raising and lowering beta")
    if raise_ev:
        return _decision(clamp01(beta_prev + step), "raise", "plateau; a higher beta attains more")
    if lower_ev:
        return _decision(clamp01(beta_prev - step), "lower",
                         "plateau at high beta; a lower beta does as well")
    return _decision(DEFAULT_BETA, "default", "inconclusive: plateau without sweep evidence")


def validate_grid(plan: GridPlan, ctx: GridPlanningContext, *, replay: bool) -> GridValidity:
    """Check a grid plan against the hard caps and, in replay, against the recorded grid.

    valid ⇔ ``1 ≤ B ≤ hard_max_branch_count`` and ``0 ≤ R ≤ hard_max_refine_count``. In replay,
    in support ⇔ both trace counts are known, ``B ≤ trace_branch_count`` and
    ``R ≤ trace_refine_count``; live plans are always in support. ``cells = B·(R + 1)`` if valid else
    0. ``reasons``: one string per validity violation, then one per support failure (project
    decision: support failures are listed too).
    """
    B, R = plan.branch_count, plan.refine_count
    reasons: list[str] = []
    if not 1 <= B <= ctx.hard_max_branch_count:
        reasons.append(f"branch_count {B} outside [1, {ctx.hard_max_branch_count}]")
    if not 0 <= R <= ctx.hard_max_refine_count:
        reasons.append(f"refine_count {R} outside [0, {ctx.hard_max_refine_count}]")
    valid = not reasons
    in_support = True
    if replay:
        tb, tr = ctx.trace_branch_count, ctx.trace_refine_count
        if tb is None or tr is None:
            in_support = False
            reasons.append("out of support: the recorded grid size is unknown")
        else:
            if tb < B:
                in_support = False
                reasons.append(f"out of support: branch_count {B} > recorded {tb}")
            if tr < R:
                in_support = False
                reasons.append(f"out of support: refine_count {R} > recorded {tr}")
    return GridValidity(valid, in_support, B * (R + 1) if valid else 0, tuple(reasons))
