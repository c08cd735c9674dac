"""Attribution rows of the scoreboard (docs/algorithm/formulas.md §2.8): predicted hits and unpredicted
regressions."""

from __future__ import annotations

from rsi_common.math import _validate as v
from rsi_common.math.reports import AttributionRow
from rsi_common.math.values import Edit, EvalResult

__all__ = ["attribute"]

_MAX_REGRESSIONS = 12
_MAX_HYPOTHESIS = 160


def attribute(edit: Edit, inc_ev: EvalResult, cand_ev: EvalResult, k: int, *, t: int | None, variant: str,
              threshold: float | None = None, partial: bool = False) -> AttributionRow:
    """Compare per-task means of the candidate and the incumbent for one declared edit.

    ``pred`` = ``str(x)`` for each ``predicted_affected`` entry present in both ``per_task`` maps
    (duplicates kept, as written); ``hits`` = pred with candidate mean > incumbent mean; ``drops`` =
    tasks in both maps (incumbent order) with ``cand.mean − inc.mean ≤ −threshold``.

    Args:
        edit: the declared edit. inc_ev, cand_ev: the two evaluations.
        k: trials per task; the default threshold is ``1 / max(1, k)`` (one trial's worth).
        t, variant: the round and the candidate label copied into the row.
        threshold: a drop of at least this much (mean reward units, ≥ 0) counts as a regression.
        partial: the candidate was early-stopped (its per-task means cover finished trials only).

    Raises:
        InvalidInput: a negative or NaN threshold.
    """
    v.integer("k", k)
    thr = 1 / max(1, k) if threshold is None else v.non_negative("threshold", threshold)
    inc, cand = inc_ev.per_task, cand_ev.per_task
    pred = [str(x) for x in edit.predicted_affected if str(x) in inc and str(x) in cand]
    hits = [x for x in pred if cand[x].mean > inc[x].mean]
    drops = [x for x in inc if x in cand and cand[x].mean - inc[x].mean <= -thr]
    return AttributionRow(
        t=t,
        variant=variant,
        edit_id=edit.id,
        hypothesis=str(edit.hypothesis)[:_MAX_HYPOTHESIS],
        n_predicted=len(pred),
        predicted_hit=tuple(hits),
        hit_rate=round(len(hits) / len(pred), 2) if pred else None,
        unpredicted_regressions=tuple(d for d in drops if d not in pred)[:_MAX_REGRESSIONS],
        partial=partial,
    )
