"""The no-signal run's remembered worlds (rsi_worker/consolidate/quiet_worlds.py,
docs/performance/consolidation.md#the-no-signal-path): a world reused only for an equal row, never for
a poisoned one, and a decision that needs a record taken again on the run's own pool — the same answer
as the full path's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rsi_worker.consolidate import quiet, quiet_worlds
from rsi_worker.consolidate.pool_memo import Head
from rsi_worker.consolidate.quiet_worlds import NeedsRecord, remembered
from rsi_worker.consolidate.state import EMPTY_DIGEST
from tests.support.pipeline import Stack

REQUEST = "Compare laptops: use search query=laptops"


@pytest.fixture(autouse=True)
def _fresh_memos() -> Iterator[None]:
    quiet_worlds.clear()
    quiet._ANSWERED.clear()
    yield
    quiet_worlds.clear()


def _head(wid: str, signals: str | None = None, seq: int = 1) -> Head:
    return Head(wid, f"io-{wid}", f"conv-{wid}", seq, 1.0, 1, signals, "h0", "sim-1", "sim")


def test_a_world_is_reused_for_an_equal_row_only() -> None:
    a, b = _head("a"), _head("b", '{"stars": 5}')
    first = remembered([a, b])
    assert first is not None
    again = remembered([_head("a"), b])  # an equal row (another object), the same row
    assert again is not None and [id(w) for w in again.usable()] == [id(w) for w in first.usable()]
    changed = remembered([_head("a", '{"stars": 1}'), _head("b", '{"stars": 5}', seq=2)])
    assert changed is not None
    w_a, w_b = changed.usable()
    assert w_a is not first.usable()[0] and w_a.signals == {"stars": 1} and w_a.stored_digest != EMPTY_DIGEST
    assert w_b is not first.usable()[1] and w_b.seq == 2
    assert first.usable()[0].signals == {} and first.usable()[0].stored_digest == EMPTY_DIGEST  # untouched


def test_a_poisoned_row_is_left_to_the_runs_own_pool() -> None:
    assert remembered([_head("a"), _head("bad", '{"stars": NaN}')]) is None
    assert remembered([_head("bad", "not json")]) is None


def test_a_remembered_world_reads_no_record() -> None:
    pool = remembered([_head("a", '{"stars": 5}')])
    assert pool is not None and pool.skipped == {}
    with pytest.raises(NeedsRecord):
        _ = pool.usable()[0].answer
    with pytest.raises(NeedsRecord):
        pool.prefetch(["a"])


def test_a_decision_that_needs_a_record_is_taken_on_the_runs_pool(stack: Stack,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An accepted answer not yet remembered needs its record: the remembered worlds give way to the
    run's pool (one build), which reads it; the next run decides from the memo alone (no build)."""
    built: list[int] = []
    real = quiet.WorldPool

    def counted(conn: Any, heads: Any) -> Any:
        built.append(len(heads))
        return real(conn, heads)

    monkeypatch.setattr(quiet, "WorldPool", counted)
    stack.say("shop", "c0", REQUEST)
    turn = stack.say("shop", "c1", REQUEST, {"stars": 5})
    lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
    nxt = quiet.decide(stack.deps, lease)
    assert nxt is not None and nxt.result is not None
    assert nxt.result.reason == "new signals only confirm the current answers" and built == [2]
    stack.coord.finish(lease)
    turn = stack.say("shop", "c2", REQUEST)
    lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
    nxt = quiet.decide(stack.deps, lease)
    assert nxt is not None and nxt.result is not None and built == [2]  # the memo alone
    assert nxt.result.reason == "new signals only confirm the current answers"  # nothing recorded yet
    assert len(nxt.ctx.loaded) == 3


def test_signals_without_the_answer_are_checked_once_per_remembered_world(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``quiet._scored`` of a world whose signals do not quote its answer: ``checks_for``'s answer, computed
    once for a remembered world's signals object, again for another object of the same id."""
    from rsi_worker.consolidate import signals as sig

    calls: list[int] = []
    real = sig.checks_for

    def counted(s: Any, answer: str = "") -> Any:
        calls.append(1)
        return real(s, answer)

    monkeypatch.setattr(quiet, "checks_for", counted)
    quiet._CHECKED.clear()
    pool = remembered([_head("n", '{"implicit": {"kind": "neutral"}}'), _head("p", '{"stars": 1}')])
    assert pool is not None
    neutral, poor = pool.usable()
    for _ in range(3):
        assert quiet._scored(neutral, pool) is bool(real(neutral.signals)) is False
        assert quiet._scored(poor, pool) is bool(real(poor.signals)) is True
    assert len(calls) == 2
    other = remembered([_head("n", '{"stars": 2}')])  # the same id, other signals
    assert other is not None and quiet._scored(other.usable()[0], other) is True and len(calls) == 3
