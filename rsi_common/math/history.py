"""History summaries over the edit log 𝓛 (RRSI Eq.11, Eq.14; docs/algorithm/formulas.md §2.5).

Callers pass only the rows of rounds before the current one (``r.t < t``); these functions do not
filter on it. Legacy rows without ``t`` count as measured/tried/accepted history but never fall
inside a recency window (project decision).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rsi_common.kinds import KINDS
from rsi_common.math import _validate as v
from rsi_common.math.reports import AcceptedEdit, PruneTarget
from rsi_common.math.values import EditRecord

__all__ = ["accepted_edits", "measured", "prune_set", "recent_yield", "tried"]


def measured(records: Iterable[EditRecord]) -> list[EditRecord]:
    """Rows with a measured ΔS (not a gate outcome) whose component is a kind of 𝒦."""
    return [r for r in records if r.delta_S is not None and r.component in KINDS]


def tried(records: Iterable[EditRecord]) -> set[str]:
    """𝒯_t: kinds with at least one measured row. Gate failures do not make a kind tried."""
    return {r.component for r in measured(records) if r.component is not None}


def recent_yield(records: Iterable[EditRecord], t: int, n_prune: int) -> dict[str, float]:
    """g_t: per tried kind, the best measured ΔS of rows with ``t − r.t ≤ n_prune`` (−∞ if none).

    Raises:
        InvalidInput: ``n_prune < 0``.
    """
    v.integer("t", t)
    v.integer("n_prune", n_prune, 0)
    rows = measured(records)
    g = dict.fromkeys(sorted(tried(rows)), -math.inf)
    for r in rows:
        if r.t is None or r.component is None or r.delta_S is None or t - r.t > n_prune:
            continue
        g[r.component] = max(g[r.component], r.delta_S)
    return g


def accepted_edits(records: Iterable[EditRecord]) -> dict[str, list[AcceptedEdit]]:
    """For every kind of 𝒦 (empty lists included), its accepted rows in record order."""
    out: dict[str, list[AcceptedEdit]] = {k: [] for k in KINDS}
    for r in records:
        if r.accepted and r.component in out:
            out[r.component].append(AcceptedEdit(r.t, r.edit_id, r.hypothesis, r.delta_S))
    return out


def prune_set(records: Iterable[EditRecord], t: int, n_prune: int) -> list[PruneTarget]:
    """𝓑_t: tried kinds with ``g_t(ℓ) ≤ 0`` (−∞ included), sorted by name.

    Reading: kinds with no strictly improving measured edit in the last ``n_prune`` rounds. Each
    target carries ``round(g, 5)`` (``None`` for −∞) and the kind's accepted edits. Pruning is advice
    to the proposer, never a selection filter.
    """
    rows = list(records)
    g = recent_yield(rows, t, n_prune)
    acc = accepted_edits(rows)
    return [
        PruneTarget(k, None if g[k] == -math.inf else round(g[k], 5), tuple(acc[k]))
        for k in sorted(g)
        if g[k] <= 0
    ]
