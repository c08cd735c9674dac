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
from rsi_common.db import get_agent, get_replay_row, save_replay_row
from rsi_common.db.models import ReplayRow
from rsi_common.harness import Harness, materialize
from rsi_common.kernel import RetryPolicy
from rsi_common.replay import PolicySpec, ReplayResult, replay_world
from rsi_worker.consolidate.context import Deps, RoundContext, load_harness, load_world
from rsi_worker.consolidate.evaluate import INCUMBENT, TrialSlot, score
from rsi_worker.consolidate.spend import charge, over_cap, usage_tokens
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


def _harness(session: Any, ctx: RoundContext, candidate: str, drafts: Mapping[str, Any]) -> Harness:
    if candidate == INCUMBENT:
        return load_harness(session, ctx.agent_id, ctx.start_version)
    return materialize(drafts[candidate]["payload"])


class _Heartbeat:
    """The replay's cancel callback: the candidate's cancel flag, and a lease renewal at most every
    ``lease_s / 3`` seconds so a long replay keeps its run alive; a lost lease cancels the replay."""

    def __init__(self, deps: Deps, ctx: RoundContext, candidate: str) -> None:
        self.deps, self.ctx, self.candidate = deps, ctx, candidate
        self.every_s = max(1.0, deps.settings.lease_s / 3)
        self.last = time.monotonic()

    def __call__(self) -> bool:
        if time.monotonic() - self.last >= self.every_s:
            self.last = time.monotonic()
            lease = Lease(self.ctx.agent_id, self.ctx.token, self.ctx.fence, self.ctx.io_id or "")
            if not self.deps.coord.renew(lease):
                return True
        if self.candidate != INCUMBENT and self.ctx.early_stop:
            return self.deps.coord.is_cancelled(self.ctx.run_id, self.candidate)
        return False


def _result_of(deps: Deps, ctx: RoundContext, slot: TrialSlot, world: Any, harness: Harness) -> ReplayResult:
    if slot.source != "replay":
        return ReplayResult.from_json(slot.reuse or {})
    return replay_world(
        world,
        harness,
        PolicySpec(ctx.provider, ctx.model),
        seed=slot.trial,
        cancelled=_Heartbeat(deps, ctx, slot.candidate),
        llm_factory=lambda p: deps.models(p.provider, p.model, "policy"),
        retry=RetryPolicy.from_settings(deps.settings),
    )


def _store(deps: Deps, ctx: RoundContext, slot: TrialSlot, **values: Any) -> dict[str, Any]:
    with deps.sessions() as session:
        row, created = save_replay_row(
            session, ctx.run_id, slot.candidate, slot.world_id, slot.trial, source=slot.source, **values
        )
        session.commit()
        out = row_json(row)
    if created:  # a duplicate delivery stored nothing: count each trial once
        deps.metrics.replay_finished(out)
    if slot.candidate != INCUMBENT and ctx.early_stop and out["status"] != "cancelled":
        passed = int(out["result"].get("passed", 0)) if out["status"] == "ok" else 0
        weight = int(out["weight"]) if out["status"] == "ok" else 0
        deps.coord.report_trial(ctx.run_id, slot.candidate, slot_key(slot), passed, weight)
    return out


def _second_wave_stopped(deps: Deps, ctx: RoundContext, slot: TrialSlot,
                         checks_of: Mapping[str, Any]) -> bool:
    """A candidate's second-wave replay waits for its first wave (:mod:`~rsi_worker.consolidate.waves`);
    True when it must not run (the candidate was cancelled, or the lease lost, meanwhile)."""
    wait_s = deps.params.early_stop_wave_s
    if slot.candidate == INCUMBENT or not ctx.early_stop or slot.source != "replay" or wait_s <= 0:
        return False
    return await_first_wave(slot, ctx.slots.get(slot.candidate) or [], checks_of,
                            lambda: deps.coord.bound_progress(ctx.run_id, slot.candidate),
                            _Heartbeat(deps, ctx, slot.candidate), wait_s=wait_s, margin=deps.coord.margin)


def run_trial(deps: Deps, ctx: RoundContext, drafts: Mapping[str, Any], slot: TrialSlot) -> dict[str, Any]:
    """Run (or return the stored result of) one trial slot of a running run; see the module docstring.
    The ``trials`` member of the state machine (``flow.run_trial``), run after its lease check;
    ``drafts``: the run's stored drafts (a candidate's harness)."""
    run_id = ctx.run_id
    with deps.sessions() as session:
        existing = get_replay_row(session, run_id, slot.candidate, slot.world_id, slot.trial)
        if existing is not None:
            return row_json(existing)
        verdicts = dict(get_agent(session, ctx.agent_id).state.get("verdicts") or {})
        world = load_world(session, slot.world_id, ctx.agent_id)
        try:
            harness = _harness(session, ctx, slot.candidate, drafts)
        except Exception as exc:
            harness, harness_error = None, f"{type(exc).__name__}: {exc}"[:300]
        session.commit()  # no transaction stays open across model calls (read-only)
    checks = ctx.checks.get(slot.world_id, [])
    if slot.candidate != INCUMBENT and ctx.early_stop and deps.coord.is_cancelled(run_id, slot.candidate):
        return _store(deps, ctx, slot, status="cancelled", result={"reason": "cancelled before the replay"})
    if world is None or harness is None:
        error = "world no longer stored" if world is None else harness_error
        return _store(deps, ctx, slot, status="missing", weight=len(checks), result={"error": error})
    if _second_wave_stopped(deps, ctx, slot, checks_of=ctx.checks):
        return _store(deps, ctx, slot, status="cancelled", result={"reason": "cancelled before the replay"})
    if slot.source == "replay" and over_cap(deps, ctx.agent_id) is not None:
        return _store(deps, ctx, slot, status="missing", weight=len(checks),
                      result={"error": "spend cap reached: not replayed"})
    replay = _result_of(deps, ctx, slot, world, harness)
    if slot.source == "replay":
        charge(deps, ctx.agent_id, int(replay.policy_tokens or 0))
    if replay.status == "cancelled":
        return _store(deps, ctx, slot, status="cancelled", result={"replay": replay.to_json()})
    if replay.missing:
        return _store(
            deps,
            ctx,
            slot,
            status="missing",
            weight=len(checks),
            result={"replay": replay.to_json(), "error": replay.error},
        )
    judge_client = deps.role(ctx, "judge")
    judge = CriteriaJudge(judge_client, cache=verdicts)
    reward, weight, graded = score(
        checks, request_text(world.request, world.history), replay.answer, judge.verdict
    )
    passed = sum(1 for v in graded if v["pass"])
    charge(deps, ctx.agent_id, usage_tokens({"judge": judge_client.usage()}))
    result = {
        "replay": replay.to_json(),
        "passed": passed,
        "verdicts": graded,
        "new_verdicts": judge.new_entries,
        "usage": {"judge": judge_client.usage()},
    }
    tokens = replay.policy_tokens if replay.policy_tokens else None
    return _store(deps, ctx, slot, status="ok", reward=reward, weight=weight, tokens=tokens, result=result)
