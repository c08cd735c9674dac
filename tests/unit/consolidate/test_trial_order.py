"""A candidate's trial order for early stop (docs/performance/consolidation.md#trial-order)."""

from __future__ import annotations

from rsi_worker.consolidate.evaluate import plan_candidate

CHECKS = {"a": [{}], "b": [{}, {}, {}], "c": [{}, {}], "d": [{}, {}], "e": [{}, {}]}


def keys(slots: list) -> list[tuple[str, int]]:  # type: ignore[type-arg]
    return [(s.world_id, s.trial) for s in slots]


def test_failing_then_fresh_then_heaviest_worlds_first_with_a_worlds_trials_together() -> None:
    slots = plan_candidate("A", list(CHECKS), 2, checks=CHECKS, failing=["e", "c"], fresh=["d", "c"])
    assert keys(slots) == [("c", 0), ("c", 1), ("e", 0), ("e", 1), ("d", 0), ("d", 1), ("b", 0), ("b", 1),
                           ("a", 0), ("a", 1)]
    assert {s.candidate for s in slots} == {"A"} and {s.source for s in slots} == {"replay"}


def test_every_slot_once_whatever_the_order() -> None:
    ordered = plan_candidate("B", list(CHECKS), 3, checks=CHECKS, failing=["a"], fresh=["b"])
    plain = plan_candidate("B", list(CHECKS), 3)
    assert sorted(keys(ordered)) == sorted(keys(plain)) and len(set(keys(ordered))) == 15
    assert keys(plain)[:3] == [("a", 0), ("a", 1), ("a", 2)]  # without checks: the order of W
