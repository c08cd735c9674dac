"""One replay trial of a run (docs/algorithm/consolidation.md §3.6.2): the body of the ``replay_trial`` task.

Idempotency key: ``(run_id, candidate, world_id, trial)``. A stored row for the slot is returned
as it is (redelivery); a new row is inserted at most once (``INSERT … ON CONFLICT DO NOTHING``)
and the early-stop report is slot-idempotent in Redis, so a second execution never counts a
trial twice. The function never raises for a replay, judge or model failure: those become a
``missing`` row. It returns a plain dict (a chord member's structured result).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rsi_common.coord import Lease
from rsi_common.db.models import ReplayRow
from rsi_common.db.replays import store_trial
from rsi_common.errors import LeaseLost
from rsi_common.harness import Harness
from rsi_common.kernel import RetryPolicy
from rsi_common.replay import PolicySpec, ReplayResult, replay_world
from rsi_worker.consolidate.context import Deps, RoundContext
from rsi_worker.consolidate.evaluate import INCUMBENT, TrialSlot, score
from rsi_worker.consolidate.spend import Spend, charge, today, usage_tokens
from rsi_worker.consolidate.trial_load import TrialReads, read_slot
from rsi_worker.consolidate.waves import await_first_wave
from rsi_worker.roles.judge import CriteriaJudge, request_text

__all__ = ["row_json", "run_trial", "slot_key"]


def slot_key(slot: TrialSlot) -> str:
    """The Redis slot id of an early-stop report."""
    return f"{slot.world_id}#{slot.trial}"


def row_json(row: ReplayRow) -> dict[str, Any]:
    """A stored trial row as the dict :func:`~rsi_worker.consolidate.evaluate.assemble` reads."""
    return {
        "candidate": row.candidate,
        "world_id": row.world_id,
        "trial": row.trial,
        "source": row.source,
        "status": row.status,
        "reward": row.reward,
        "weight": row.weight,
        "tokens": row.tokens,
        "result": dict(row.result or {}),
    }


def _reads(deps: Deps, ctx: RoundContext, slot: TrialSlot, drafts: Mapping[str, Any]) -> TrialReads:
    """A trial's reads (:func:`~rsi_worker.consolidate.trial_load.read_slot`) in a read transaction of
    their own (deferred on SQLite: no write turn held), for a caller that did not read them with the
    run row (:func:`~rsi_worker.consolidate.trial_load.load_trial`)."""
    with deps.sessions() as session:
        session.connection(execution_options={"sqlite_begin": "DEFERRED"})
        reads = read_slot(session, ctx, slot, drafts)
        session.commit()  # no transaction stays open across model calls (read-only)
    return reads


class _Heartbeat:
    """The replay's cancel callback: the candidate's cancel flag, and a lease renewal at most every
    ``lease_s / 3`` seconds so a long replay keeps its run alive; a lost lease cancels the replay.

    ``fresh``: the flag was just read (not set) by the trial's first round trip (``_renew``), so the
    first check — before the first model call, or the second wave's first look — is answered from
    that read; every later check (after a wait or a model call) reads Redis
    (docs/performance/consolidation.md#a-trials-cost)."""

    def __init__(self, deps: Deps, ctx: RoundContext, candidate: str, *, fresh: bool = False) -> None:
        self.deps, self.ctx, self.candidate = deps, ctx, candidate
        self.every_s = max(1.0, deps.settings.lease_s / 3)
        self.last = time.monotonic()
        self.fresh = fresh

    def __call__(self) -> bool:
        if self.fresh:
            self.fresh = False
            return False
        if time.monotonic() - self.last >= self.every_s:
            self.last = time.monotonic()
            lease = Lease(self.ctx.agent_id, self.ctx.token, self.ctx.fence, self.ctx.io_id or "")
            if not self.deps.coord.renew(lease):
                return True
        if self.candidate != INCUMBENT and self.ctx.early_stop:
            return self.deps.coord.is_cancelled(self.ctx.run_id, self.candidate)
        return False


def _result_of(deps: Deps, ctx: RoundContext, slot: TrialSlot, world: Any, harness: Harness,
               heartbeat: _Heartbeat) -> ReplayResult:
    if slot.source != "replay":
        return ReplayResult.from_json(slot.reuse or {})
    return replay_world(
        world,
        harness,
        PolicySpec(ctx.provider, ctx.model),
        seed=slot.trial,
        cancelled=heartbeat,
        llm_factory=lambda p: deps.models(p.provider, p.model, "policy"),
        retry=RetryPolicy.from_settings(deps.settings),
    )


def _store(deps: Deps, ctx: RoundContext, slot: TrialSlot, **values: Any) -> dict[str, Any]:
    with deps.sessions() as session:  # a write turn for one INSERT (and a read-back of a duplicate)
        out, created = store_trial(
            session, ctx.run_id, slot.candidate, slot.world_id, slot.trial, source=slot.source, **values
        )
        session.commit()
    if created:  # a duplicate delivery stored nothing: count each trial once
        deps.metrics.replay_finished(out)
    if slot.candidate != INCUMBENT and ctx.early_stop and out["status"] != "cancelled":
        passed = int(out["result"].get("passed", 0)) if out["status"] == "ok" else 0
        weight = int(out["weight"]) if out["status"] == "ok" else 0
        deps.coord.report_trial(ctx.run_id, slot.candidate, slot_key(slot), passed, weight)
    return out


def _second_wave_stopped(deps: Deps, ctx: RoundContext, slot: TrialSlot,
                         checks_of: Mapping[str, Any], heartbeat: _Heartbeat) -> bool:
    """A candidate's second-wave replay waits for its first wave (:mod:`~rsi_worker.consolidate.waves`);
    True when it must not run (the candidate was cancelled, or the lease lost, meanwhile)."""
    wait_s = deps.params.early_stop_wave_s
    if slot.candidate == INCUMBENT or not ctx.early_stop or slot.source != "replay" or wait_s <= 0:
        return False
    return await_first_wave(slot, ctx.slots.get(slot.candidate) or [], checks_of,
                            lambda: deps.coord.bound_progress(ctx.run_id, slot.candidate),
                            heartbeat, wait_s=wait_s, margin=deps.coord.margin)


def _renew(deps: Deps, ctx: RoundContext, slot: TrialSlot) -> tuple[bool, Spend | None]:
    """Renew the run's lease and read the candidate's cancel flag and today's spend, in one round
    trip: ``(cancelled, the spend when a cap is reached)`` (docs/performance/consolidation.md#a-trials-cost).
    A spend that cannot be read counts as no cap reached (``spend.over_cap``).

    Raises:
        LeaseLost: the lease is held by someone else or expired.
    """
    p = deps.params
    cand = slot.candidate if slot.candidate != INCUMBENT and ctx.early_stop else None
    day = today() if slot.source == "replay" and (p.agent_daily_tokens or p.cluster_daily_tokens) else None
    lease = Lease(ctx.agent_id, ctx.token, ctx.fence, ctx.io_id or "")
    renewed, cancelled, spent = deps.coord.renew_for_trial(lease, ctx.run_id, cand, day)
    if not renewed:
        raise LeaseLost(f"agent {ctx.agent_id}: lease of fence {ctx.fence} is no longer held")
    if day is None or spent is None:
        return cancelled, None
    spend = Spend(day, spent[0], spent[1], p.agent_daily_tokens, p.cluster_daily_tokens)
    return cancelled, spend if spend.reason() else None


def run_trial(deps: Deps, ctx: RoundContext, drafts: Mapping[str, Any], slot: TrialSlot, *,
              reads: TrialReads | None = None) -> dict[str, Any]:
    """Run (or return the stored result of) one trial slot of a running run; see the module docstring.
    The ``trials`` member of the state machine (``flow.run_trial``); ``drafts``: the run's stored
    drafts (a candidate's harness); ``reads``: the trial's reads when the caller read them with the
    run row (``trial_load.load_trial``), else they are read here. The lease is renewed first
    (a lost lease raises :class:`~rsi_common.errors.LeaseLost` before anything is stored)."""
    cancelled, capped = _renew(deps, ctx, slot)
    if reads is None:
        reads = _reads(deps, ctx, slot, drafts)
    existing, verdicts, world, harness, harness_error = (
        reads.existing, reads.verdicts, reads.world, reads.harness, reads.harness_error)
    if existing is not None:
        return existing
    checks = ctx.checks.get(slot.world_id, [])
    if cancelled:
        return _store(deps, ctx, slot, status="cancelled", result={"reason": "cancelled before the replay"})
    if world is None or harness is None:
        error = "world no longer stored" if world is None else harness_error
        return _store(deps, ctx, slot, status="missing", weight=len(checks), result={"error": error})
    heartbeat = _Heartbeat(deps, ctx, slot.candidate, fresh=True)  # the flag was read by _renew
    if _second_wave_stopped(deps, ctx, slot, checks_of=ctx.checks, heartbeat=heartbeat):
        return _store(deps, ctx, slot, status="cancelled", result={"reason": "cancelled before the replay"})
    if capped is not None:
        return _store(deps, ctx, slot, status="missing", weight=len(checks),
                      result={"error": "spend cap reached: not replayed"})
    replay = _result_of(deps, ctx, slot, world, harness, heartbeat)
    policy_tokens = int(replay.policy_tokens or 0) if slot.source == "replay" else 0
    if replay.status == "cancelled" or replay.missing:
        charge(deps, ctx.agent_id, policy_tokens)
    if replay.status == "cancelled":
        return _store(deps, ctx, slot, status="cancelled", result={"replay": replay.to_json(shared=True)})
    if replay.missing:
        return _store(
            deps,
            ctx,
            slot,
            status="missing",
            weight=len(checks),
            result={"replay": replay.to_json(shared=True), "error": replay.error},
        )
    judge_client = deps.role(ctx, "judge")
    judge = CriteriaJudge(judge_client, cache=verdicts)
    reward, weight, graded = score(
        checks, request_text(world.request, world.history), replay.answer, judge.verdict
    )
    passed = sum(1 for v in graded if v["pass"])
    # the replay's and the judge's tokens in one round trip (docs/performance/consolidation.md#a-trials-cost)
    charge(deps, ctx.agent_id, policy_tokens + usage_tokens({"judge": judge_client.usage()}))
    result = {
        "replay": replay.to_json(shared=True),
        "passed": passed,
        "verdicts": graded,
        "new_verdicts": judge.new_entries,
        "usage": {"judge": judge_client.usage()},
    }
    tokens = replay.policy_tokens if replay.policy_tokens else None
    return _store(deps, ctx, slot, status="ok", reward=reward, weight=weight, tokens=tokens, result=result)
