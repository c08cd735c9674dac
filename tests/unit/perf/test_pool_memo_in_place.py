"""The steady window without a sort when a changed row keeps its rank (rsi_worker/consolidate/pool_memo.py
``_on_top``): whenever it answers, its window is the full sort's, on random windows and changes."""

from __future__ import annotations

import random
from typing import Any

from rsi_worker.consolidate.pool_memo import Head, PoolMemo, _key, _on_top


def _row(h: Head, tainted: bool = False) -> tuple[Any, ...]:
    """``h`` as a ``changed`` row (``quiet_sql`` column order, ``tainted`` last)."""
    return (h.id, h.io_id, h.interaction_id, h.seq, h.clock, h.replayable, h.harness_version, h.model,
            h.provider, h.signals, tainted)


def _head(i: int, clock: float, signals: str | None = None) -> Head:
    return Head(f"w{i:03d}", f"io{i}", None, 1, clock, 1, signals, "h0", "sim-1", "sim")


def _sorted_union(rows: tuple[Head, ...], changed: list[tuple[Any, ...]]) -> list[Head]:
    by_id = {h.id: h for h in rows}
    for r in changed:
        by_id.pop(r[0], None)
        if not r[10]:
            by_id[r[0]] = Head.at(r)
    return sorted(by_id.values(), key=_key, reverse=True)


def test_in_place_and_on_top_give_the_full_sort() -> None:
    rng = random.Random(15)
    answered = {"in_place": 0, "declined": 0}
    for _ in range(400):
        heads = [_head(i, 100.0 + rng.choice([i, i, 0.5 * i])) for i in range(rng.randint(1, 12))]
        rows = tuple(sorted(heads, key=_key, reverse=True))
        memo = PoolMemo("c", 1, 60, rows, True, ordered=True)
        changed: list[tuple[Any, ...]] = []
        for j in rng.sample(range(len(rows)), k=rng.randint(0, min(3, len(rows)))):
            old = rows[j]
            kind = rng.choice(["signals", "signals", "moved", "tainted"])
            if kind == "signals":
                changed.append(_row(old._replace(signals=f'{{"stars": {rng.randint(1, 5)}}}')))
            elif kind == "moved":
                changed.append(_row(old._replace(clock=float(old.clock or 0) + rng.choice([-1.0, 1000.0]))))
            else:
                changed.append(_row(old, tainted=True))
        for n in range(rng.randint(0, 2)):
            clock = rng.choice([1000.0 + n, 50.0])  # on top, or below the window's first row
            changed.append(_row(_head(500 + n, clock)))
        got = _on_top(memo, changed)
        if got is None:
            answered["declined"] += 1
            continue
        answered["in_place"] += 1
        assert got == _sorted_union(rows, changed)
        assert len({h.id for h in got}) == len(got)
    assert answered["in_place"] > 100 and answered["declined"] > 50, answered
