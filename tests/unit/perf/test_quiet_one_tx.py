"""The no-signal run in one SQLite transaction (rsi_worker/consolidate/quiet.py ``decide_and_record``,
rsi_common/db/write_turn.py; docs/performance/consolidation.md#the-no-signal-path): the read turned
into the write in place, the same stored row as the two-transaction write, and every race in the
window between the read and the write — a commit elsewhere, a newer fence, a duplicate delivery's
row — met by the separate write's rules; a failure stores nothing and releases the write turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from rsi_common.db import get_run, runs
from rsi_common.db.models import AgentRow
from rsi_common.db.write_turn import _TURNS, stale_snapshot
from rsi_worker.bench.ingest import StatementCounter
from rsi_worker.consolidate import flow, quiet
from rsi_worker.consolidate.opening import open_row
from tests.support.pipeline import Stack

REQUEST = "Compare laptops: use search query=laptops"
NEWER = 2**62
"""A fence above any lease's (fences are time-based)."""


def _turn_free(stack: Stack) -> bool:
    turns: Any = _TURNS[stack.engine]
    return not turns._lock.locked()


def _in_window(monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]) -> None:
    """Run ``act`` (on other connections) between the run's read and its write: when the renewal's
    answer is read, after the decision."""
    real = quiet.renewal

    def renewal(deps: Any, r: Any) -> Any:
        act()
        return real(deps, r)

    monkeypatch.setattr(quiet, "renewal", renewal)


def _fence(stack: Stack, agent: str) -> int:
    with stack.sessions() as s:
        return int(s.execute(sa.select(AgentRow.applied_fence).where(AgentRow.id == agent)).scalar_one())


def _stored(stack: Stack, run_id: str | None) -> tuple[Any, ...]:
    with stack.sessions() as s:
        run = get_run(s, run_id or "")
        result = {k: v for k, v in dict(run.result or {}).items() if k not in ("run_id", "seconds")}
        params = dict(run.params or {})
        return run.status, run.reason, run.kind, result, sorted(params), len(params["loaded"]), \
            sorted(params["digests"].values())


def _run(stack: Stack, agent: str, conv: str,
         signals: dict[str, Any] | None = None) -> tuple[Any, dict[str, int], int]:
    """One turn and its run through ``flow``: the result, the statements by kind, the lease's fence."""
    turn = stack.say(agent, conv, REQUEST, signals)
    lease = stack.lease(agent, turn.world["io_id"] if turn.world else "")
    counter = StatementCounter(stack.engine)
    try:
        nxt = flow.open_run(stack.deps, lease)
        result, rerun = flow.close(stack.deps, nxt) if nxt.kind == "final" else (None, None)
        kinds = dict(counter.kinds)
    finally:
        counter.close()
    assert rerun is None
    return result, kinds, lease.fence


def test_one_transaction_stores_the_row_of_the_two_transaction_write(stack: Stack,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Differential: twin agents fed the same turns, one through the one-transaction path, the other
    through the read and the separate write (``decide`` + ``record``): the same decisions, stored rows
    (status, reason, kind, result, context's keys, loaded worlds and digests) and seen state."""
    one: list[tuple[Any, ...]] = []
    for i, signals in enumerate((None, {"stars": 5}, None, None)):
        result, kinds, fence = _run(stack, "shop", f"c{i}", signals)
        assert result is not None and "BEGIN IMMEDIATE" not in kinds and kinds["BEGIN DEFERRED"] == 1, kinds
        assert _fence(stack, "shop") == fence
        one.append(_stored(stack, result.run_id))
    monkeypatch.setattr(quiet, "decide_and_record", lambda deps, lease, **k: quiet.decide(deps, lease, **k))
    two: list[tuple[Any, ...]] = []
    for i, signals in enumerate((None, {"stars": 5}, None, None)):
        result, kinds, fence = _run(stack, "twin", f"c{i}", signals)
        assert result is not None and kinds["BEGIN IMMEDIATE"] == 1, kinds  # the separate write
        assert _fence(stack, "twin") == fence
        two.append(_stored(stack, result.run_id))
    assert one == two
    assert [r[1] for r in one] == ["no turn has a signal to learn from yet",
                                   "new signals only confirm the current answers",
                                   *["no new correction or problem to fix"] * 2]
    assert sorted(stack.state("shop").seen.values()) == sorted(stack.state("twin").seen.values())


def test_a_commit_elsewhere_in_the_window_falls_back_to_the_separate_write(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another agent's turn committed between the read and the write: SQLite refuses the upgrade
    (a stale snapshot), nothing of the read's transaction is written, and the separate write stores
    the row; the write turn is free afterwards."""
    stack.say("other", "o1", REQUEST)
    _in_window(monkeypatch, lambda: stack.say("other", "o2", REQUEST))
    result, kinds, fence = _run(stack, "shop", "c1")
    assert result is not None and (result.status, result.reason) == \
        ("recorded", "no turn has a signal to learn from yet")
    assert kinds["BEGIN DEFERRED"] == 1 and kinds["BEGIN IMMEDIATE"] >= 2, kinds  # o2's turn, then the write
    assert kinds["INSERT rsi_runs"] == 1 and kinds["UPDATE rsi_agents"] >= 2, kinds  # the refused one too
    assert _stored(stack, result.run_id)[:2] == ("recorded", "no turn has a signal to learn from yet")
    assert _fence(stack, "shop") == fence and _turn_free(stack)


def test_a_newer_fence_in_the_window_records_the_run_superseded(stack: Stack,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def newer() -> None:
        with stack.sessions() as s:
            s.execute(sa.update(AgentRow).where(AgentRow.id == "shop").values(applied_fence=NEWER))
            s.commit()

    stack.say("shop", "c0", REQUEST)  # the agent row exists before the window
    _in_window(monkeypatch, newer)
    result, _, fence = _run(stack, "shop", "c1")
    assert result is not None and (result.status, result.reason) == ("interrupted", "superseded")
    assert _fence(stack, "shop") == NEWER > fence and _turn_free(stack)  # not moved back


def test_a_duplicate_deliverys_row_in_the_window_leaves_it_the_run(stack: Stack,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    turn = stack.say("shop", "c1", REQUEST)
    lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
    opened: list[str] = []
    _in_window(monkeypatch, lambda: opened.append(open_row(stack.deps, lease)[0].run_id))
    nxt = flow.open_run(stack.deps, lease)
    assert nxt.kind == "final" and flow.close(stack.deps, nxt) == (None, None)
    with stack.sessions() as s:
        assert [(r.id, r.status) for r in runs(s, "shop", 10)] == [(opened[0], "running")]
    assert _fence(stack, "shop") == 0 and _turn_free(stack)
    assert stack.coord.renew(lease)  # the lease is left to the delivery that owns the run


def test_a_run_row_already_at_the_fence_stops_without_writing(stack: Stack) -> None:
    """The one-transaction path itself finding the row at the insert (not in its read): ``stop``,
    everything rolled back."""
    turn = stack.say("shop", "c1", REQUEST)
    lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
    real = quiet.count

    def count(conn: Any, name: str, params: Any) -> int:
        return 0 if name == "insert" else real(conn, name, params)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quiet, "count", count)
        nxt = flow.open_run(stack.deps, lease)
    assert nxt.kind == "stop"
    assert _fence(stack, "shop") == 0 and _turn_free(stack)  # the swap rolled back


def test_a_failure_in_the_write_stores_nothing_and_frees_the_turn(stack: Stack) -> None:
    turn = stack.say("shop", "c1", REQUEST)
    lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
    real = quiet.count

    def count(conn: Any, name: str, params: Any) -> int:
        if name == "insert":
            raise RuntimeError("boom after the swap")
        return real(conn, name, params)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quiet, "count", count)
        with pytest.raises(RuntimeError, match="boom"):
            flow.open_run(stack.deps, lease)
    assert _fence(stack, "shop") == 0 and _turn_free(stack)
    with stack.sessions() as s:
        assert runs(s, "shop", 10) == []
    # the caller's failure path (fail_run) then runs the run again on the same lease: it is written
    nxt = flow.open_run(stack.deps, lease)
    assert nxt.kind == "final" and flow.close(stack.deps, nxt)[0] is not None
    assert _fence(stack, "shop") == lease.fence


def test_stale_snapshot_names_only_sqlites_busy() -> None:
    import sqlite3

    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = 517  # SQLITE_BUSY_SNAPSHOT
    other = sqlite3.OperationalError("disk I/O error")
    other.sqlite_errorcode = 10
    assert stale_snapshot(sa.exc.OperationalError("UPDATE", {}, busy))
    assert not stale_snapshot(sa.exc.OperationalError("UPDATE", {}, other))
    assert not stale_snapshot(RuntimeError("database is locked"))


def test_the_write_holds_the_engines_write_turn(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """The upgraded write is queued with the engine's other writers (its turn held from the first write
    statement to the commit), as a ``BEGIN IMMEDIATE`` writer is."""
    held: list[tuple[str, bool]] = []
    real = quiet.count

    def count(conn: Any, name: str, params: Any) -> int:
        held.append((name, not _turn_free(stack)))
        return real(conn, name, params)

    monkeypatch.setattr(quiet, "count", count)
    result, kinds, _ = _run(stack, "shop", "c1")
    assert result is not None and "BEGIN IMMEDIATE" not in kinds
    assert held == [("swap", True), ("insert", True)] and _turn_free(stack)
