"""Exact-bound early stop of a candidate evaluation (docs/algorithm/formulas.md §2.10).

Partial state over the trials of one candidate (all three in weight units; integers in consolidation):

* ``A`` = Σ r·w over finished trials that are not missing (passed criteria);
* ``B`` = Σ w over finished trials that are not missing;
* ``R`` = Σ w over trials not yet finished plus finished missing trials (a missing trial is unknown).

**Monotonicity.** A finished non-missing trial with r·w = p ≤ w moves w from R to B and adds p to A,
so Ŝ_max does not increase; a finished missing trial changes nothing. Once :func:`can_stop_exactly`
holds it holds for every later state, so it may be checked after any trial, in any order.

**Decisions are unchanged** (docs/architecture.md invariant 4): the full evaluation's Ŝ' ≤ final Ŝ_max ≤
Ŝ_max at the stop < min(S★ − δ, S_t) − margin, and margin ≥ eps, so the full evaluation also fails the
floor (an invalid one too, by the invalid-but-hopeless rule), and both recorded ΔS are negative.
"""

from __future__ import annotations

from typing import Literal

from rsi_common.errors import InvalidInput
from rsi_common.math import _validate as v
from rsi_common.math.estimator import valid_measurement
from rsi_common.math.values import EvalResult

__all__ = [
    "FLOAT_GUARD",
    "can_stop_exactly",
    "completed_status",
    "early_stop_record_delta",
    "invalid_but_hopeless",
    "upper_lower",
]

FLOAT_GUARD = 1e-9
"""Default ``margin``: absorbs the rounding difference between the bound and ``aggregate``'s own
summation order; it must stay ≥ the production ``float_eps`` (1e-12)."""

_SLACK = 1e-12


def upper_lower(A: float, B: float, R: float) -> tuple[float, float]:
    """``(Ŝ_max, Ŝ_min)`` = ``((A + R)/(B + R), A/(B + R))``; ``(0.0, 0.0)`` when ``B + R = 0``.

    Raises:
        InvalidInput: a value is negative, NaN or infinite, or ``A > B·(1 + 1e−12) + 1e−12``.
    """
    A, B, R = v.non_negative("A", A), v.non_negative("B", B), v.non_negative("R", R)
    if A > B * (1 + _SLACK) + _SLACK:
        raise InvalidInput(f"A ({A}) exceeds B ({B}): more passed weight than finished weight")
    den = B + R
    if den == 0:
        return 0.0, 0.0
    return (A + R) / den, A / den


def can_stop_exactly(A: float, B: float, R: float, S_star: float, delta: float, S_t: float, *,
                     margin: float = FLOAT_GUARD) -> bool:
    """Whether rejection at the floor is already certain: ``Ŝ_max + margin < min(S★ − δ, S_t)``.

    The ``S_t`` term keeps the recorded ΔS negative when S_t < S★ − δ (offline loops).

    Raises:
        InvalidInput: ``margin < 0``, δ < 0, or a bad (A, B, R).
    """
    margin = v.non_negative("margin", margin)
    delta = v.non_negative("delta", delta)
    upper, _ = upper_lower(A, B, R)
    return upper + margin < min(v.finite("S_star", S_star) - delta, v.finite("S_t", S_t))


def early_stop_record_delta(A: float, B: float, R: float, S_t: float) -> float:
    """ΔS recorded for an early-stopped candidate: ``Ŝ_max − S_t`` (an upper bound of the full ΔS;
    negative whenever the stop was allowed)."""
    upper, _ = upper_lower(A, B, R)
    return upper - v.finite("S_t", S_t)


def invalid_but_hopeless(A: float, B: float, R: float, S_star: float, delta: float, S_t: float, *,
                         margin: float = FLOAT_GUARD) -> bool:
    """docs/algorithm/formulas.md §2.10.4 predicate over a *completed* evaluation's final (A, B, R): the
    floor rejects it
    whatever its missing trials would have scored (= :func:`can_stop_exactly` on the final state)."""
    return can_stop_exactly(A, B, R, S_star, delta, S_t, margin=margin)


def completed_status(ev: EvalResult, phi: float, A: float, B: float, R: float, S_star: float, delta: float,
                     S_t: float, *, hopeless_rule: bool,
                     margin: float = FLOAT_GUARD) -> Literal["measured", "eval_invalid"]:
    """Classify a completed (not early-stopped) candidate evaluation.

    A valid measurement (``missing ≤ φ·n_expected``) is ``"measured"``. An invalid one is
    ``"measured"`` — judged normally and so rejected at the floor — when ``hopeless_rule`` is on
    (production) and :func:`invalid_but_hopeless` holds for the final (A, B, R); otherwise it is the
    gate ``"eval_invalid"`` (always so in paper mode).
    """
    if valid_measurement(ev, phi):
        return "measured"
    if hopeless_rule and invalid_but_hopeless(A, B, R, S_star, delta, S_t, margin=margin):
        return "measured"
    return "eval_invalid"
