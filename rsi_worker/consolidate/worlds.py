"""Evaluation-world selection (SPEC §3.5)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypeVar

from rsi_worker.consolidate.signals import WorldLike, negative

__all__ = ["select_worlds"]

W = TypeVar("W", bound=WorldLike)


def select_worlds(scored: Sequence[W], fresh: Collection[str], n_eval: int = 8) -> list[W]:
    """The evaluation worlds W of a round, in ``per_task`` order.

    Three groups — (a) fresh, (b) not fresh and negative, (c) the rest — each sorted by
    ``(clock, seq)`` descending, concatenated and cut to ``max(1, n_eval)``.

    Args:
        scored: replayable worlds with at least one check.
        fresh: ids of the worlds whose signals changed since the last completed run.
        n_eval: maximum number of evaluation worlds.
    """

    def newest_first(ws: list[W]) -> list[W]:
        return sorted(ws, key=lambda w: (w.clock, w.seq), reverse=True)

    group_a = [w for w in scored if w.id in fresh]
    group_b = [w for w in scored if w.id not in fresh and negative(w.signals)]
    group_c = [w for w in scored if w.id not in fresh and not negative(w.signals)]
    ordered = newest_first(group_a) + newest_first(group_b) + newest_first(group_c)
    return ordered[: max(1, n_eval)]
