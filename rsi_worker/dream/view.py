"""What a policy sees (docs/dream/replay.md#information-hiding).

A view is built by closures over a snapshot taken for one decision: the revealed cells with their
fields and scores, the legal cells with their structural fields only (``score`` None, ``seq = -1``),
and nothing about any other cell. The snapshot is plain JSON (:func:`view_data`), so the sandbox
sends exactly the same thing to its child process and builds the same view there
(:func:`view_from_data`); a policy cannot reach the question, the world or another cell through it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PolicyView", "view_from_data"]


@dataclass(frozen=True)
class PolicyView:
    """The decision view. Every attribute is a function returning a fresh copy.

    ``revealed()``: one dict per revealed cell, in reveal order, with ``id, branch, attempt, parent,
    score, evaluated, valid, fail_class, error, delta_vs_baseline, delta_vs_parent`` (``score`` on the
    task's own scale, None when not evaluated). ``legal()``: one dict per legal cell with ``id, branch,
    attempt, parent, seq = -1, score = None``. ``width()`` = W, ``baseline()`` = the root's score,
    ``round()`` = decisions made so far, ``rounds_left()`` = K2 − round, ``n_valid()`` / ``n_total()``
    = valid / all revealed cells.
    """

    revealed: Callable[[], list[dict[str, Any]]]
    legal: Callable[[], list[dict[str, Any]]]
    width: Callable[[], int]
    baseline: Callable[[], float]
    round: Callable[[], int]
    rounds_left: Callable[[], int]
    n_valid: Callable[[], int]
    n_total: Callable[[], int]


def view_from_data(data: dict[str, Any], *, fresh: bool = False) -> PolicyView:
    """Build the closures over a private copy of ``data`` (the output of a question's snapshot);
    ``fresh``: ``data`` is already private (just decoded from a message), used as is."""
    snap = data if fresh else copy.deepcopy(data)
    revealed: list[dict[str, Any]] = snap["revealed"]
    legal: list[dict[str, Any]] = snap["legal"]
    width, baseline, rnd, left = (
        int(snap["width"]),
        float(snap["baseline"]),
        int(snap["round"]),
        int(snap["rounds_left"]),
    )
    n_valid = sum(1 for c in revealed if c["valid"])
    n_total = len(revealed)
    return PolicyView(
        revealed=lambda: [dict(c) for c in revealed],
        legal=lambda: [dict(c) for c in legal],
        width=lambda: width,
        baseline=lambda: baseline,
        round=lambda: rnd,
        rounds_left=lambda: left,
        n_valid=lambda: n_valid,
        n_total=lambda: n_total,
    )
