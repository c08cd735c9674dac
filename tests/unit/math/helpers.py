"""Builders shared by the math tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rsi_common.math import Candidate, Edit, EvalResult, RRSIParams, TaskResult, aggregate

PARAMS_94 = RRSIParams(beta0=0.1, beta1=40.0, w_s=100.0, w_c=15.0, w_n=0.5)
"""The weights of docs/check-vectors.md §9.4 (also the docs/algorithm/formulas.md §1.3 defaults)."""

WEIGHTS_94: dict[str, float] = {"beta0": 0.1, "beta1": 40.0, "w_s": 100.0, "w_c": 15.0, "w_n": 0.5}


def tr(rewards: Sequence[float], weights: Sequence[float] = (), tokens: Sequence[Any] = (),
       missing: int = 0) -> TaskResult:
    """A TaskResult from lists."""
    return TaskResult(tuple(rewards), tuple(weights), tuple(tokens), missing)


def ev_of(tasks: Mapping[str, TaskResult | Sequence[float]], k: int = 2, job: str = "",
          extra: Mapping[str, Any] | None = None) -> EvalResult:
    """Aggregate tasks given as TaskResults or plain reward lists."""
    per = {x: t if isinstance(t, TaskResult) else tr(t) for x, t in tasks.items()}
    return aggregate(per, k, job, extra)


def scored_ev(n_pass: int, n_tasks: int = 10, tokens: float | None = 1000, job: str = "") -> EvalResult:
    """``n_tasks`` × 2 trials: ``n_pass`` tasks [1, 1], the rest [0, 0], every trial ``tokens``."""
    per = {f"x{i}": tr([1.0, 1.0] if i < n_pass else [0.0, 0.0], tokens=[tokens, tokens])
           for i in range(n_tasks)}
    return aggregate(per, 2, job)


def cand(variant: str, ev: EvalResult | None, components: Sequence[str] = ("prompt",),
         gate: str | None = None) -> Candidate:
    """A candidate with one edit per component."""
    edits = tuple(Edit(id=f"E{i + 1}", component=c, hypothesis=f"h{i + 1}") for i, c in enumerate(components))
    return Candidate(variant, edits, ev, gate)
