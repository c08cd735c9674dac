"""Bulk ``randrange`` draws (rsi_common/math/draws.py) and the bootstrap that uses them: the same
indices, the same floats and the same generator state as one ``randrange`` at a time
(docs/performance/consolidation.md#a-runs-cost-counted)."""

from __future__ import annotations

import random
import statistics

import pytest

from rsi_common.math import draws
from rsi_common.math.calibrate import bootstrap_se
from rsi_common.math.draws import Draws, available
from tests.unit.math.helpers import ev_of, tr


class _Plain(random.Random):
    """A subclass: ``bootstrap_se`` takes the one-by-one path for it (same generator otherwise)."""


def _reference_se(ev: object, reps: int, gen: random.Random) -> float:
    """The bootstrap's definition, one ``randrange`` per draw (the docstring of ``bootstrap_se``)."""
    tasks = [(t.rewards, t.weight_list(), len(t.rewards)) for t in ev.per_task.values() if t.rewards]  # type: ignore[attr-defined]
    out = []
    for _ in range(reps):
        num = den = 0.0
        for rewards, weights, n in tasks:
            for _ in range(n):
                i = gen.randrange(n)
                num += rewards[i] * weights[i]
                den += weights[i]
        out.append(num / den if den else 0.0)
    return statistics.pstdev(out) if reps >= 2 else 0.0


def test_the_interpreter_allows_bulk_draws() -> None:
    assert available()


@pytest.mark.parametrize("seed", [0, 7, 12345])
@pytest.mark.parametrize("block", [1, 3, 4096])
def test_bulk_draws_are_randrange_draws_and_leave_the_same_state(seed: int, block: int) -> None:
    sizes = [1, 2, 3, 4, 5, 6, 7, 9, 17, 1000, 2**16 + 1, 2**31 - 1, 2**31, 2**32 - 1] * 40
    ref, fast = random.Random(seed), random.Random(seed)
    want = [ref.randrange(n) for n in sizes]
    draws = Draws(fast, block=block)
    assert [draws.below(n) for n in sizes] == want
    draws.close()
    assert fast.getstate() == ref.getstate()


def test_closing_without_draws_keeps_the_state() -> None:
    gen = random.Random(3)
    before = gen.getstate()
    Draws(gen).close()
    assert gen.getstate() == before


@pytest.mark.parametrize("ev", [
    ev_of({"a": [1, 0], "b": [1, 1]}),
    ev_of({"w1": tr([1, 0], [1, 1]), "w2": tr([0.5, 0.5], [2, 2]), "w3": tr([1 / 3, 2 / 3], [3, 7])}),
    ev_of({"t1": [1, 0, 1], "t2": [0.25], "t3": [], "t4": [0.1, 0.2, 0.3, 0.4, 0.5]}, k=5),
    ev_of({f"x{i}": [(i * 7 % 10) / 10, (i * 3 % 10) / 10] for i in range(40)}),
])
def test_the_bootstrap_gives_the_same_float_and_leaves_the_generator_where_randrange_does(ev: object) -> None:
    for reps in (0, 1, 2, 300):
        bulk, one = random.Random(11), random.Random(11)
        se = bootstrap_se(ev, reps, bulk)  # type: ignore[arg-type]
        assert se == _reference_se(ev, reps, one)
        assert bulk.getstate() == one.getstate()
        assert bootstrap_se(ev, reps, _Plain(11)) == se  # type: ignore[arg-type]


def test_without_bulk_draws_the_bootstrap_draws_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    ev = ev_of({"a": [1, 0], "b": [1, 1]})
    monkeypatch.setattr(draws, "available", lambda: False)
    gen = random.Random(7)
    assert bootstrap_se(ev, 200, gen) == _reference_se(ev, 200, random.Random(7))
