"""The no-signal fast path (rsi_worker/consolidate/quiet.py,
docs/performance/consolidation.md#the-no-signal-path): the same decision as the full path from one
read, one write, and the races at write time."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from rsi_common.db import get_run, runs
from rsi_common.db.models import AgentRow
from rsi_worker.bench.ingest import StatementCounter
from rsi_worker.consolidate import flow, quiet
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.pipeline import Stack

REQUEST = "Compare laptops: use search query=laptops"


def _full_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quiet, "decide_and_record", lambda *a, **k: None)


def _row(stack: Stack, run_id: str | None) -> Any:
    with stack.sessions() as s:
        run = get_run(s, run_id or "")
        return run.status, run.reason, dict(run.result or {}), dict(run.params or {}), run.finished_at


def test_quiet_runs_decide_like_the_full_path(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """First turn (nothing scored), an accepted answer (new signals confirm), then a new turn (nothing
    new): each decided by the fast path with the full path's status and reason, the row closed."""
    seen: list[tuple[str, str]] = []
    for signals in (None, {"stars": 5}, None):
        turn = stack.say("shop", f"c{len(seen)}", REQUEST, signals)
        lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
        counter = StatementCounter(stack.engine)
        try:
            nxt = flow.open_run(stack.deps, lease)
            assert nxt.quiet is not None
            fast, rerun = flow.close(stack.deps, nxt)
            kinds = dict(counter.kinds)
        finally:
            counter.close()
        assert fast is not None and rerun is None
        # one transaction: the read, turned into the write (quiet.decide_and_record)
        assert kinds.get("BEGIN DEFERRED") == 1 and "BEGIN IMMEDIATE" not in kinds, kinds
        assert nxt.quiet.written
        assert kinds.get("INSERT rsi_runs") == 1 and "UPDATE rsi_runs" not in kinds
        status, reason, result, params, finished = _row(stack, fast.run_id)
        assert (status, reason) == (fast.status, fast.reason) == ("recorded", result["reason"])
        assert finished is not None and params["phase"] == "open" and params["loaded"]
        seen.append((fast.status, fast.reason))
    assert [r for _, r in seen] == ["no turn has a signal to learn from yet",
                                    "new signals only confirm the current answers",
                                    "no new correction or problem to fix"]
    state = stack.state("shop")

    # the full path on an identical second agent gives the same results and the same state
    _full_path(monkeypatch)
    full: list[tuple[str, str]] = []
    for signals in (None, {"stars": 5}, None):
        stack.say("twin", f"c{len(full)}", REQUEST, signals)
        r = stack.consolidate("twin")
        full.append((r.status, r.reason))
    assert full == seen
    assert sorted(stack.state("twin").seen.values()) == sorted(state.seen.values())


def test_a_correction_or_a_follow_up_takes_the_full_path(stack: Stack) -> None:
    stack.say("shop", "c1", REQUEST)
    follow = stack.say("shop", "c1", "And what about phones? use search query=phones")
    lease = stack.lease("shop", follow.world["io_id"] if follow.world else "")
    assert quiet.decide(stack.deps, lease) is None  # an unread pair: the reader must read it
    stack.coord.finish(lease)
    stack.say("shop", "c2", REQUEST)
    corr = stack.say("shop", "c2", CORRECTION)
    assert stack.consolidate("shop", corr).status == "adopted"


def test_a_newer_fence_applied_meanwhile_records_the_run_superseded(stack: Stack) -> None:
    turn = stack.say("shop", "c1", REQUEST)
    lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
    nxt = quiet.decide(stack.deps, lease)
    assert nxt is not None and nxt.quiet is not None
    with stack.sessions() as s:
        s.execute(sa.update(AgentRow).where(AgentRow.id == "shop").values(applied_fence=lease.fence + 5))
        s.commit()
    result, rerun = flow.close(stack.deps, nxt)
    assert result is not None and (result.status, result.reason) == ("interrupted", "superseded")
    assert rerun is None and _row(stack, result.run_id)[:2] == ("interrupted", "superseded")
    with stack.sessions() as s:
        assert s.execute(sa.select(AgentRow.applied_fence).where(AgentRow.id == "shop")).scalar_one() \
            == lease.fence + 5  # not moved back


def test_a_row_at_the_fence_written_meanwhile_leaves_the_run_to_that_delivery(stack: Stack) -> None:
    turn = stack.say("shop", "c1", REQUEST)
    lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
    nxt = quiet.decide(stack.deps, lease)
    assert nxt is not None
    from rsi_worker.consolidate.opening import open_row

    ctx, running = open_row(stack.deps, lease)  # a duplicate delivery opened the run (full path)
    assert running
    assert flow.close(stack.deps, nxt) == (None, None)
    with stack.sessions() as s:
        mine = runs(s, "shop", 10)
        assert [(r.id, r.status) for r in mine] == [(ctx.run_id, "running")]  # nothing else written
        assert s.execute(sa.select(AgentRow.applied_fence).where(AgentRow.id == "shop")).scalar_one() == 0
    assert stack.coord.renew(lease)  # the lease was left to the delivery that owns the run
