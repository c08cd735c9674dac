"""The weighted estimator Ŝ, Ĉ (RRSI Eq.3, docs/algorithm/formulas.md §2.2) and the edit budget (RRSI
Eq.4/Eq.9, §2.3)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rsi_common.errors import InvalidInput
from rsi_common.math import _validate as v
from rsi_common.math.values import EvalResult, TaskResult

__all__ = [
    "aggregate",
    "check_edit_cardinality",
    "delta_s",
    "edit_budget",
    "edit_budget_raw",
    "relative_cost_change",
    "valid_measurement",
]


def _positive_token(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if x > 0 else None


def aggregate(per_task: Mapping[str, TaskResult], k: int, job: str = "",
              extra: Mapping[str, Any] | None = None) -> EvalResult:
    """Aggregate per-task trials into one evaluation (RRSI Eq.3, weighted).

    ``Ŝ = Σ_x Σ_j w·r / Σ_x Σ_j w``, summed left to right in task then trial order (0.0 if the total
    weight is 0). A missing trial is stored as r = 0 with its full weight, so it lowers Ŝ.
    ``Ĉ`` = arithmetic mean of the token counts that are numbers (not bool) and > 0 over all trials,
    ``None`` if there is none. ``n_expected = len(per_task)·k``; ``missing = Σ tr.missing``.

    Args:
        per_task: task id → trials, in the order that drives the bootstrap (docs/algorithm/formulas.md §2.9).
        k: trials per task (≥ 1).
        job: a label of the evaluation.
        extra: copied into ``EvalResult.extra`` (default ``{}``).

    Raises:
        InvalidInput: ``per_task`` is empty (an evaluation of no task is no measurement; project
            decision) or ``k < 1``.
    """
    v.integer("k", k, 1)
    if not v.mapping("per_task", per_task):
        raise InvalidInput("aggregate: an evaluation needs at least one task")
    num = 0.0
    den = 0.0
    tok_sum = 0.0
    tok_n = 0
    missing = 0
    for tr in per_task.values():
        if not isinstance(tr, TaskResult):
            raise InvalidInput(f"per_task values must be TaskResult, got {type(tr).__name__}")
        for r, w, tok in zip(tr.rewards, tr.weight_list(), tr.token_list(), strict=True):
            num += r * w
            den += w
            t = _positive_token(tok)
            if t is not None:
                tok_sum += t
                tok_n += 1
        missing += tr.missing
    S = num / den if den else 0.0
    return EvalResult(
        job=job,
        k=k,
        per_task=per_task,
        S=S,
        C=tok_sum / tok_n if tok_n else None,
        n_expected=len(per_task) * k,
        missing=missing,
        extra=dict(extra or {}),
    )


def valid_measurement(ev: EvalResult, phi: float) -> bool:
    """``ev.missing ≤ φ·ev.n_expected``: few enough trials failed (φ ∈ [0, 1])."""
    phi = v.unit_interval("phi", phi)
    return ev.missing <= phi * ev.n_expected


def delta_s(S_new: float, S_t: float) -> float:
    """ΔS = S_new − S_t (score units)."""
    return v.finite("S_new", S_new) - v.finite("S_t", S_t)


def relative_cost_change(C_new: float | None, C_t: float | None) -> float:
    """ΔC = (C_new − C_t) / C_t; 0.0 when either cost is ``None`` or 0.

    Raises:
        InvalidInput: a cost is negative, infinite or NaN.
    """
    if C_new is None or C_t is None:
        return 0.0
    new = v.non_negative("C_new", C_new)
    old = v.non_negative("C_t", C_t)
    if new == 0 or old == 0:
        return 0.0
    return (new - old) / old


def _budget_args(T: int, b_min: int, b_max: int) -> None:
    v.integer("T", T)
    v.integer("b_min", b_min, 1)
    v.integer("b_max", b_max)
    if b_max < b_min:
        raise InvalidInput(f"b_max ({b_max}) must be >= b_min ({b_min})")


def edit_budget_raw(t: float, T: int, b_min: int, b_max: int) -> float:
    """The cosine-annealed budget before rounding (RRSI Eq.4/Eq.9).

    ``T ≤ 0`` → ``float(b_max)``; otherwise ``t`` is clamped into [0, T] and the result is
    ``b_min + (b_max − b_min)·0.5·(1 + cos(π·t/T))``.

    Raises:
        InvalidInput: ``t`` NaN, or not ``1 ≤ b_min ≤ b_max`` (integers).
    """
    _budget_args(T, b_min, b_max)
    t = v.number("t", t)
    if T <= 0:
        return float(b_max)
    t = min(max(t, 0.0), float(T))
    return b_min + (b_max - b_min) * 0.5 * (1 + math.cos(math.pi * t / T))


def edit_budget(t: float, T: int, b_min: int, b_max: int) -> int:
    """``ceil(round(edit_budget_raw(t, T, b_min, b_max), 9))`` edits; ``T ≤ 0`` → ``b_max``.

    The 9-decimal rounding absorbs float noise: (t=2, T=3, 1, 5) has raw 2.0000000000000004 → 2.
    """
    return math.ceil(round(edit_budget_raw(t, T, b_min, b_max), 9))


def check_edit_cardinality(n: int, b_t: int) -> bool:
    """``0 ≤ n ≤ b_t``: a candidate declares no more independent edits than the budget."""
    return 0 <= n <= b_t
