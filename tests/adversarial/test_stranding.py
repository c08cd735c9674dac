"""Class 3 of issue 11 (the stranding half): no exception in any step strands an agent.

Inline driver on SQLite and PostgreSQL with a real redis-server. Every test asserts the Redis keys
the agent is left with: after a failure there is no lease and no pending mark, only the fence.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from rsi_common import db
from rsi_common.coord import Lease, fence_key, lease_key, pending_key
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import CredentialError
from rsi_worker.consolidate import consolidate_inline, flow, opening
from rsi_worker.consolidate.finalize import settle
from rsi_worker.jobs.scenario import CORRECTION
from tests.adversarial.stranding import (
    GOOD,
    LONE,
    REQUEST,
    InjectedFailure,
    agent_keys,
    escaped,
    nested,
    once,
    real_stack,
    run_keys,
    turn_arrives,
    write_json,
)
from tests.support.pipeline import SerialExecutor, Stack

pytestmark = pytest.mark.timeout(120)
A = "shop"
# the package attribute ``finalize`` is the function; the module is needed to patch inside it
finalize_mod = importlib.import_module("rsi_worker.consolidate.finalize")


@pytest.fixture
def stack(db_url: str, redis_url: str) -> Iterator[Stack]:
    s = real_stack(db_url, redis_url)
    yield s
    s.close()


@pytest.fixture
def rclient(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def runs_of(stack: Stack, agent: str = A) -> list[db.RunRow]:
    with stack.sessions() as s:
        return list(reversed(db.runs(s, agent, 50)))  # oldest first


def scenario(stack: Stack) -> tuple[str, str]:
    """A correction to learn from (its io triggers the run) and a later good turn (the pending io)."""
    stack.say(A, "c1", REQUEST)
    io = str(stack.say(A, "c1", CORRECTION).world["io_id"])  # type: ignore[index]
    later = str(stack.say(A, "c2", GOOD, signals={"stars": 5}).world["io_id"])  # type: ignore[index]
    return io, later


# Where the injected exception is raised: (module or table, name). The state machine looks its step
# bodies up in ``flow.STEPS`` and the modules their helpers at call time, so patching injects into
# that one step.
STEPS: dict[str, tuple[Any, str]] = {
    "open_run before its row": (opening, "open_run_row"),
    "open_run after its params": (opening, "_read_implicit"),
    "after_incumbent": (flow.STEPS, "after_incumbent"),
    "judge_round": (flow.STEPS, "judge_round"),
    "finalize": (flow, "finalize"),
    "the final write itself": (finalize_mod, "final_write"),
}


def inject(monkeypatch: pytest.MonkeyPatch, where: Any, name: str, wrap: Any) -> None:
    """Replace ``where[name]`` (a table) or ``where.name`` (a module) by ``wrap(real)``."""
    if isinstance(where, dict):
        monkeypatch.setitem(where, name, wrap(where[name]))
    else:
        monkeypatch.setattr(where, name, wrap(getattr(where, name)))


@pytest.mark.parametrize("step", list(STEPS))
def test_an_exception_in_any_step_releases_the_lease_and_reruns_the_pending_turn_once(
    stack: Stack, rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    io, later = scenario(stack)
    module, name = STEPS[step]
    inject(monkeypatch, module, name, lambda real: once(real, turn_arrives(stack.coord, A, later)))
    lease = stack.lease(A, io)
    if step == "open_run before its row":
        with pytest.raises(InjectedFailure):  # reported to the caller, after the re-run it handed on
            consolidate_inline(stack.deps, lease, SerialExecutor())
        (rerun,) = runs_of(stack)
    else:
        results = consolidate_inline(stack.deps, lease, SerialExecutor())
        assert [r.status for r in results] == ["failed", "adopted"]
        failed, rerun = runs_of(stack)
        assert (failed.io_id, failed.fence, failed.status) == (io, lease.fence, "failed")
        assert failed.reason == "the run failed: InjectedFailure"
        assert failed.error == {"type": "InjectedFailure", "message": "injected failure (a step that raised)"}
        assert (failed.result or {})["error"]["type"] == "InjectedFailure"
    # the pending turn was re-run exactly once, and it learned what the failed run could not
    assert (rerun.io_id, rerun.status) == (later, "adopted") and rerun.fence > lease.fence
    assert agent_keys(rclient, A) == {fence_key(A)} and run_keys(rclient) == set()
    # the agent's next good turn consolidates normally
    nxt = stack.say(A, "c3", GOOD, signals={"stars": 5})
    assert stack.consolidate(A, nxt).status == "recorded"
    assert agent_keys(rclient, A) == {fence_key(A)}


@pytest.mark.parametrize("member", ["trials", "drafts"])
def test_a_failing_trial_or_draft_is_a_missing_result_not_a_stranded_run(
    stack: Stack, rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch, member: str
) -> None:
    """Like the Celery chord members: the run goes on without that trial or draft."""
    io, later = scenario(stack)
    inject(monkeypatch, flow.MEMBERS, member, lambda real: once(real, turn_arrives(stack.coord, A, later)))
    results = consolidate_inline(stack.deps, stack.lease(A, io), SerialExecutor())
    assert len(results) == 2 and results[0].error is None
    first, rerun = runs_of(stack)
    assert first.status in ("adopted", "kept") and rerun.io_id == later and rerun.status != "running"
    assert agent_keys(rclient, A) == {fence_key(A)}


def test_settle_without_a_lease_finds_the_token_on_the_row(stack: Stack, rclient: redis.Redis) -> None:
    """The redelivery-cap path: a chord body settles a run it holds no lease for."""
    io, later = scenario(stack)
    lease = stack.lease(A, io)
    nxt = flow.open_run(stack.deps, lease)  # the row and its context (with the token) are stored
    assert nxt.kind == "trials"
    assert stack.coord.try_begin(A, later) is None
    result, rerun = settle(stack.deps, nxt.ctx.run_id, RuntimeError("task redelivered too often"))
    assert result is not None and result.status == "failed"
    assert result.error == {"type": "RuntimeError", "message": "task redelivered too often"}
    assert rerun is not None and rerun.io == later and stack.coord.lease_holder(A).token == rerun.token  # type: ignore[union-attr]
    assert stack.coord.pending(A) is None
    assert consolidate_inline(stack.deps, rerun, SerialExecutor())[0].status == "adopted"
    assert agent_keys(rclient, A) == {fence_key(A)}


def test_settle_of_a_row_without_context_finds_the_lease_by_its_fence(
    stack: Stack, rclient: redis.Redis
) -> None:
    """A row opened by an older version (no stored context): the Redis holder of its fence is used,
    never an empty token (the lease would be held until it expires, the pending turn orphaned)."""
    io, later = scenario(stack)
    lease = stack.lease(A, io)
    with stack.sessions.begin() as s:
        run_id = db.start_run(s, A, fence=lease.fence, io_id=io).id
    assert stack.coord.try_begin(A, later) is None
    result, rerun = settle(stack.deps, run_id, InjectedFailure("x"))
    assert result is not None and result.status == "failed"
    assert rerun is not None and rerun.io == later and stack.coord.renew(rerun)
    assert not stack.coord.renew(lease)
    stack.coord.finish(rerun)
    assert agent_keys(rclient, A) == {fence_key(A)}


def test_a_failure_whose_record_cannot_be_stored_is_recorded_minimally(
    stack: Stack, rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed result itself carries a value no JSON column takes: a minimal record is written."""
    io, later = scenario(stack)
    real = finalize_mod.failed_result

    def poisoned(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        result.signals = {"x": float("nan")}
        return result

    monkeypatch.setattr(finalize_mod, "failed_result", poisoned)
    arrive = turn_arrives(stack.coord, A, later)
    inject(monkeypatch, flow.STEPS, "after_incumbent", lambda real: once(real, arrive))
    results = consolidate_inline(stack.deps, stack.lease(A, io), SerialExecutor())
    assert [r.status for r in results] == ["failed", "adopted"]
    failed = runs_of(stack)[0]
    assert failed.status == "failed" and failed.result == {
        "status": "failed", "reason": "the run failed: InjectedFailure", "run_id": failed.id,
        "error": {"type": "InjectedFailure", "message": "injected failure (a step that raised)"}}
    assert agent_keys(rclient, A) == {fence_key(A)}


def test_error_records_never_echo_a_credential(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    io, _ = scenario(stack)
    secret = "sk-" + "Q7x9" * 8

    def leaky(*_a: Any, **_k: Any) -> Any:
        raise CredentialError(f"tools.calls[0].content: {secret}")

    monkeypatch.setitem(flow.STEPS, "after_incumbent", leaky)
    (result,) = consolidate_inline(stack.deps, stack.lease(A, io), SerialExecutor())
    assert result.status == "failed" and result.error is not None
    (row,) = runs_of(stack)
    assert secret not in str(row.error) and secret not in str(row.result) and secret not in str(row.reason)
    assert row.error == {"type": "CredentialError", "message": "[withheld: looks like a credential]"}


# --- poison rows ---------------------------------------------------------------------------------


@pytest.mark.parametrize("poison", ["signals: lone surrogate", "signals: nested 300 levels", "signals: NaN",
                                    "signals: not JSON", "record: lone surrogate"])
def test_a_poison_row_is_skipped_and_named_not_fatal(stack: Stack, rclient: redis.Redis, poison: str) -> None:
    ok = stack.say(A, "ok", GOOD, signals={"stars": 5})
    wid = stack.world_id(A, ok)
    scenario(stack)
    if poison == "record: lone surrogate":
        world = dict(ok.world or {})
        world["outcome"] = {**world["outcome"], "final_text": f"answer {LONE}"}
        column, text = "world", escaped(world)
    else:
        column = "signals"
        text = {"signals: lone surrogate": escaped({"stars": 5, "comment": f"bad {LONE}"}),
                "signals: nested 300 levels": nested(300),
                "signals: NaN": '{"stars": NaN}',
                "signals: not JSON": '{"stars": 5'}[poison]
    engine = stack.engine
    if engine.dialect.name == "postgresql" and poison in ("signals: NaN", "signals: not JSON"):
        with pytest.raises(sa.exc.DataError):  # PostgreSQL's json type refuses it: it cannot be stored
            write_json(engine, column, wid, text)
        return
    write_json(engine, column, wid, text)
    result = stack.consolidate(A)
    assert result.status == "adopted", (result.reason, result.error)
    reason = result.skipped_worlds[wid]
    expected = {"signals: lone surrogate": "signals.comment: lone surrogate U+D800",
                "signals: nested 300 levels": "signals: nested deeper than 128 levels",
                "signals: NaN": "signals.stars: non-finite number",
                "signals: not JSON": "signals: not valid JSON",
                "record: lone surrogate": "world.outcome.final_text: lone surrogate U+D800"}[poison]
    assert reason.startswith(expected), reason
    assert "bad" not in reason and "answer" not in reason  # the stored value is never quoted
    (row,) = [r for r in runs_of(stack) if r.id == result.run_id]
    assert (row.result or {})["skipped_worlds"] == {wid: reason}
    assert agent_keys(rclient, A) == {fence_key(A)}
    nxt = stack.say(A, "c3", GOOD, signals={"stars": 5})  # the agent's next good turn
    again = stack.consolidate(A, nxt)
    assert again.status == "recorded"
    if poison.startswith("signals"):  # every run decodes the pool's signals: still stored, still skipped
        assert wid in again.skipped_worlds
        return
    # a run with nothing to learn reads no record it does not need (docs/performance/
    # consolidation.md#the-no-signal-path); the next round reads it and names it again
    assert wid not in again.skipped_worlds
    stack.say(A, "c4", REQUEST)
    third = stack.consolidate(A, stack.say(A, "c4", CORRECTION))
    assert third.status in ("adopted", "kept") and third.skipped_worlds.get(wid) == reason


# --- the sweeper -----------------------------------------------------------------------------------


def sweep_once(stack: Stack, recorder: RecordingDispatcher) -> Any:
    from rsi_worker.cluster.sweeper import sweep

    return sweep(stack.sessions, stack.coord, recorder, stack.settings, grace_s=60.0)


def test_an_orphaned_pending_mark_is_begun_by_one_sweep(stack: Stack, rclient: redis.Redis) -> None:
    io, later = scenario(stack)
    lease = stack.lease(A, io)
    assert stack.coord.try_begin(A, later) is None  # a turn finished during the run
    assert stack.coord.delete_lease_if(A, lease.token)  # the lease went away, the mark stayed
    assert agent_keys(rclient, A) == {fence_key(A), pending_key(A)}
    recorder = RecordingDispatcher()
    report = sweep_once(stack, recorder)
    assert (report.pending_checked, report.orphaned_pending, report.enqueued, report.pending_enqueued) == (
        1, 1, 1, 1)
    (call,) = recorder.calls
    agent, io2, token, fence = call.args
    assert (agent, io2) == (A, later) and fence > lease.fence
    assert stack.coord.lease_holder(A).token == token  # type: ignore[union-attr]
    assert agent_keys(rclient, A) == {fence_key(A), lease_key(A)}
    again = sweep_once(stack, recorder)
    assert again.actions == 0 and (again.leases_checked, again.leftover_leases) == (1, 0)  # a queued task's
    assert len(recorder.calls) == 1
    resumed = consolidate_inline(stack.deps, Lease(A, token, fence, io2), SerialExecutor())
    assert [r.status for r in resumed] == ["adopted"]
    assert agent_keys(rclient, A) == {fence_key(A)}


def test_a_pending_mark_of_a_running_run_is_left_to_it(stack: Stack) -> None:
    io, later = scenario(stack)
    lease = stack.lease(A, io)
    flow.open_run(stack.deps, lease)
    assert stack.coord.try_begin(A, later) is None
    recorder = RecordingDispatcher()
    report = sweep_once(stack, recorder)
    assert report.actions == 0 and recorder.calls == [] and stack.coord.pending(A) == later


def test_a_leftover_lease_of_a_closed_run_is_deleted_by_one_sweep(stack: Stack, rclient: redis.Redis) -> None:
    """The lease a run failed to release (the old empty-token settle): its run is closed, the lease
    and a pending mark stay. After the grace period one sweep deletes it and begins the pending turn."""
    io, later = scenario(stack)
    lease = stack.lease(A, io)
    with stack.sessions.begin() as s:
        run_id = db.start_run(s, A, fence=lease.fence, io_id=io).id
        db.final_write(s, run_id, status="failed", reason="the run failed: UnicodeEncodeError")
    assert stack.coord.try_begin(A, later) is None
    recorder = RecordingDispatcher()
    fresh = sweep_once(stack, recorder)  # closed just now: the closing run may still release it
    assert fresh.actions == 0 and stack.coord.lease_holder(A).token == lease.token  # type: ignore[union-attr]
    with stack.sessions.begin() as s:  # closed long ago
        db.get_run(s, run_id).finished_at = datetime(2000, 1, 1, tzinfo=UTC)
    report = sweep_once(stack, recorder)
    assert (report.leases_checked, report.leftover_leases, report.pending_enqueued, report.enqueued) == (
        1, 1, 1, 1)
    (call,) = recorder.calls
    assert call.args[1] == later and stack.coord.lease_holder(A).token == call.args[2]  # type: ignore[union-attr]
    assert not stack.coord.renew(lease)
    assert sweep_once(stack, recorder).actions == 0
    assert agent_keys(rclient, A) == {fence_key(A), lease_key(A)}


def test_a_lease_without_a_run_row_waits_for_its_ttl_unless_it_never_expires(
    stack: Stack, rclient: redis.Redis
) -> None:
    io, _ = scenario(stack)
    lease = stack.lease(A, io)  # its consolidate task is still queued: no run row yet
    recorder = RecordingDispatcher()
    assert sweep_once(stack, recorder).actions == 0 and stack.coord.renew(lease)
    rclient.persist(lease_key(A))  # a lease that would never expire
    report = sweep_once(stack, recorder)
    assert report.leftover_leases == 1 and stack.coord.lease_holder(A) is None
    assert sweep_once(stack, recorder).actions == 0
    assert agent_keys(rclient, A) == {fence_key(A)} and recorder.calls == []


# --- rsi batch --------------------------------------------------------------------------------------


def test_a_batch_run_that_raises_is_failed_with_its_lease_released(
    stack: Stack, rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsi_worker.jobs.batch import BatchRunner, InlineLauncher

    scenario(stack)
    inject(monkeypatch, flow.STEPS, "after_incumbent", once)
    launcher = InlineLauncher(stack.deps, "batch:strand", concurrency=1)
    runner = BatchRunner(stack.sessions, stack.coord, launcher, name="strand", retry_s=0.0, poll_s=0.0,
                         sleep=lambda _s: None)
    outcome = runner.run([A]).outcomes[A]
    launcher.close()
    assert (outcome.status, outcome.attempts) == ("failed", 1)
    assert outcome.reason == "the run failed: InjectedFailure"
    assert agent_keys(rclient, A) == {fence_key(A)}
    assert stack.consolidate(A).status == "adopted"  # the agent's next run learns what the batch could not


def test_a_batch_run_that_cannot_open_is_retried_with_its_lease_released(
    stack: Stack, rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsi_worker.jobs.batch import BatchRunner, InlineLauncher

    scenario(stack)
    monkeypatch.setattr(opening, "open_run_row", once(opening.open_run_row))
    launcher = InlineLauncher(stack.deps, "batch:reopen", concurrency=1)
    runner = BatchRunner(stack.sessions, stack.coord, launcher, name="reopen", retry_s=0.0, poll_s=0.0,
                         sleep=lambda _s: None)
    outcome = runner.run([A]).outcomes[A]
    launcher.close()
    assert (outcome.status, outcome.attempts) == ("adopted", 2)
    assert agent_keys(rclient, A) == {fence_key(A)}
