"""``select_worlds``: the evaluation worlds W of a round (docs/algorithm/consolidation.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from rsi_worker.consolidate.worlds import select_worlds

NEGATIVE = {"stars": 1}
POSITIVE = {"stars": 5}


@dataclass
class World:
    id: str
    clock: float
    seq: int = 0
    signals: dict[str, Any] = field(default_factory=dict)
    interaction_id: str = ""
    answer: str = ""
    request: str = ""


def ids(worlds: list[World]) -> list[str]:
    return [w.id for w in worlds]


def test_fresh_first_then_old_negatives_then_the_rest_each_newest_first() -> None:
    scored = [
        World("old-ok", 1.0, signals=POSITIVE),
        World("fresh-old", 2.0, signals=POSITIVE),
        World("neg-new", 6.0, signals=NEGATIVE),
        World("fresh-new", 5.0, signals=NEGATIVE),
        World("neg-old", 3.0, signals=NEGATIVE),
        World("ok-new", 7.0, signals=POSITIVE),
    ]
    chosen = select_worlds(scored, fresh={"fresh-old", "fresh-new"}, n_eval=10)
    assert ids(chosen) == ["fresh-new", "fresh-old", "neg-new", "neg-old", "ok-new", "old-ok"]


def test_ties_on_clock_are_broken_by_seq_descending() -> None:
    scored = [World("a", 1.0, seq=1), World("b", 1.0, seq=3), World("c", 1.0, seq=2)]
    assert ids(select_worlds(scored, fresh={"a", "b", "c"}, n_eval=3)) == ["b", "c", "a"]


@pytest.mark.parametrize(("n_eval", "expected"), [(2, 2), (1, 1), (0, 1), (-3, 1), (50, 4)])
def test_the_cut_is_n_eval_but_never_below_one(n_eval: int, expected: int) -> None:
    scored = [World(str(i), float(i), signals=NEGATIVE) for i in range(4)]
    chosen = select_worlds(scored, fresh=set(), n_eval=n_eval)
    assert len(chosen) == expected
    assert ids(chosen) == ["3", "2", "1", "0"][:expected]


def test_a_full_cut_keeps_the_fresh_worlds_over_newer_old_ones() -> None:
    scored = [World("fresh", 0.0, signals=POSITIVE), World("newer-neg", 9.0, signals=NEGATIVE)]
    assert ids(select_worlds(scored, fresh={"fresh"}, n_eval=1)) == ["fresh"]


def test_no_scored_worlds_selects_nothing_and_the_input_is_not_reordered() -> None:
    assert select_worlds([], fresh={"x"}, n_eval=8) == []
    scored = [World("a", 1.0), World("b", 2.0)]
    select_worlds(scored, fresh=set(), n_eval=8)
    assert ids(scored) == ["a", "b"]
