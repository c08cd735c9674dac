"""``interleave``: the dispatch order of the candidates' trial slots (round-robin)."""

from __future__ import annotations

from rsi_worker.consolidate.drafting import interleave
from rsi_worker.consolidate.evaluate import TrialSlot


def slots(candidate: str, n: int) -> list[TrialSlot]:
    return [TrialSlot(candidate, f"w{i // 2}", i % 2) for i in range(n)]


def keys(out: list[TrialSlot]) -> list[tuple[str, str, int]]:
    return [s.key() for s in out]


def test_round_robin_over_the_candidates() -> None:
    out = interleave([slots("A", 3), slots("B", 3)])
    assert [s.candidate for s in out] == ["A", "B", "A", "B", "A", "B"]
    assert keys(out)[:2] == [("A", "w0", 0), ("B", "w0", 0)]


def test_uneven_lengths_keep_every_slot_once_in_each_candidates_own_order() -> None:
    per = [slots("A", 1), slots("B", 4), slots("C", 2)]
    out = interleave(per)
    assert [s.candidate for s in out] == ["A", "B", "C", "B", "C", "B", "B"]
    assert sorted(keys(out)) == sorted(s.key() for p in per for s in p)
    for cand, mine in zip("ABC", per, strict=True):
        assert [s for s in out if s.candidate == cand] == mine


def test_nothing_to_interleave() -> None:
    assert interleave([]) == []
    assert interleave([[], []]) == []
    assert interleave([slots("A", 2)]) == slots("A", 2)
