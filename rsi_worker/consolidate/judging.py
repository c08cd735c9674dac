"""Judging a round (docs/algorithm/consolidation.md §3.3 steps 14–17): assemble, select, record, decide.

The judge recomputes everything from stored rows, so a redelivered judge decides the same.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rsi_common.db import get_agent, get_run, replay_rows
from rsi_common.math import (
    Candidate,
    Decision,
    Edit,
    EvalResult,
    accepted_counts,
    attribute,
    combine_guards,
    edit_records,
    exercised_guard,
    outcome_of,
    rate_guard,
    select_round,
)
from rsi_worker.consolidate.context import Deps, RoundContext
from rsi_worker.consolidate.evaluate import Assembled, StopContext, assemble
from rsi_worker.consolidate.incumbent import records_of
from rsi_worker.consolidate.outcome import Next
from rsi_worker.consolidate.regression import lessons_learned, regression_guard
from rsi_worker.consolidate.result import ConsolidationResult
from rsi_worker.consolidate.round import Judged
from rsi_worker.consolidate.state import ConsolidationState
from rsi_worker.consolidate.trials import row_json

__all__ = ["PRODUCTION_EPS", "judge_round"]

PRODUCTION_EPS = 1e-12
DIFF_CHARS = 4000


def _candidate(v: str, draft: Mapping[str, Any], asm: Assembled | None) -> Candidate:
    edits = tuple(Edit.from_json(e) for e in draft.get("edits") or [])
    if draft.get("gate") is not None:
        return Candidate(v, edits, None, gate_failure=draft["gate"], detail=str(draft.get("detail") or ""))
    assert asm is not None
    if asm.ev is None:
        return Candidate(v, edits, None, gate_failure=asm.gate, detail=asm.detail)
    extra = dict(asm.ev.extra)
    extra["touched_params"] = list(draft.get("set_addresses") or [])
    return Candidate(v, edits, dataclasses.replace(asm.ev, extra=extra), payload=draft.get("payload"))


def _rows_for(
    cand: Candidate, decision: Decision, outcome: str, draft: Mapping[str, Any], t: int, ts: str
) -> list[dict[str, Any]]:
    stopped = bool(cand.ev is not None and cand.ev.extra.get("early_stopped"))
    if cand.ev is None:
        rows = edit_records(t, cand.variant, cand.edits, outcome, None, None, False, None, None, cand.detail)
    else:
        dS = float(cand.ev.extra["early_stop"]["delta_S"]) if stopped else decision.delta_S
        rows = edit_records(
            t,
            cand.variant,
            cand.edits,
            outcome,
            dS,
            decision.delta_C,
            outcome == "ACCEPTED",
            cand.ev.S,
            cand.ev.C,
            decision.reason,
            early_stopped=stopped,
        )
    drafted = list(draft.get("edits") or [])
    touched = [t_["address"] for t_ in draft.get("touched") or []]
    out: list[dict[str, Any]] = []
    for i, rec in enumerate(rows):
        row = rec.to_json()
        row["diff"] = str(draft.get("diff") or "")[:DIFF_CHARS]
        row["ts"] = ts
        edit = drafted[i] if i < len(drafted) else {}
        declared = edit.get("declared_component")
        if declared and declared != row.get("component"):
            row["declared_component"] = declared
        row["addresses"] = list(edit.get("addresses") or touched)
        if stopped:
            row["delta_C_partial"] = True
        out.append(row)
    return out


def _candidate_brief(
    cand: Candidate, decision: Decision, outcome: str, draft: Mapping[str, Any], delta_S: float | None
) -> dict[str, Any]:
    return {
        "variant": cand.variant,
        "outcome": outcome,
        "reason": decision.reason,
        "reason_code": decision.reason_code,
        "S": None if cand.ev is None else round(cand.ev.S, 6),
        "delta_S": None if delta_S is None else round(delta_S, 6),
        "delta_C": None if decision.delta_C is None else round(decision.delta_C, 6),
        "mechanism": str(draft.get("mechanism") or "")[:300],
        "components": cand.components,
        "early_stopped": bool(cand.ev is not None and cand.ev.extra.get("early_stopped")),
        "detail": str(cand.detail or draft.get("detail") or "")[:300],
        "trials_run": None if cand.ev is None else cand.ev.extra.get("trials_run"),
    }


def _load(
    deps: Deps, run_id: str, agent_id: str
) -> tuple[dict[str, Any], ConsolidationState, list[dict[str, Any]]]:
    with deps.sessions() as session:
        session.connection(execution_options={"sqlite_begin": "DEFERRED"})  # a read: no write turn
        drafts = dict(get_run(session, run_id).drafts or {})
        state = ConsolidationState.from_json(get_agent(session, agent_id).state)
        rows = [row_json(r) for r in replay_rows(session, run_id)]
        session.commit()  # end the read transaction (keeps loaded rows usable)
    return drafts, state, rows


def _select(
    deps: Deps, ctx: RoundContext, cands: Sequence[Candidate], inc_ev: EvalResult, state: ConsolidationState
) -> tuple[Candidate | None, list[Decision]]:
    p, rnd = deps.params, ctx.round.set_up()
    guard = combine_guards(
        rate_guard(
            p.max_valid_rate_drop,
            p.max_nosub_rise,
            valid_key="valid_rate",
            nosub_key="no_submission_rate",
            eps=PRODUCTION_EPS,
        ),
        exercised_guard,
        regression_guard(ctx.lessons),
    )
    counts = accepted_counts(records_of(state), before_t=ctx.t)
    return select_round(
        cands,
        inc_ev,
        rnd.S_star,
        rnd.delta,
        p.rrsi(),
        counts,
        guard,
        tie="production",
        enabled=rnd.enabled,
        eps=PRODUCTION_EPS,
    )


def judge_round(deps: Deps, ctx: RoundContext) -> Next:
    """Steps 14–17 from the stored rows; returns the final ``Next`` (``kept`` or ``adopted``)."""
    t0 = time.monotonic()
    run_id = ctx.run_id
    drafts, state, all_rows = _load(deps, run_id, ctx.agent_id)
    p, rnd, t = deps.params, ctx.round.set_up(), ctx.t
    incumbent, inc_ev = ctx.round.measured()
    stop = StopContext(rnd.S_star, rnd.delta, rnd.S_t, p.invalid_missing_frac)
    cands: list[Candidate] = []
    for v in sorted(drafts):
        asm = None
        if drafts[v].get("gate") is None:
            mine = [r for r in all_rows if r["candidate"] == v]
            asm = assemble(ctx.worlds, ctx.checks, mine, p.k, f"r{t}{v}", stop)
        cands.append(_candidate(v, drafts[v], asm))
    winner, decisions = _select(deps, ctx, cands, inc_ev, state)
    ts = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    new_rows: list[dict[str, Any]] = []
    scoreboard: list[dict[str, Any]] = []
    briefs = []
    for cand, decision in zip(cands, decisions, strict=True):
        outcome = outcome_of(cand, winner, decision)
        rows = _rows_for(cand, decision, outcome, drafts[cand.variant], t, ts)
        new_rows.extend(rows)
        if cand.ev is not None:
            partial = bool(cand.ev.extra.get("early_stopped"))
            scoreboard += [
                attribute(e, inc_ev, cand.ev, p.k, t=t, variant=cand.variant, partial=partial).to_json()
                for e in cand.edits
            ]
        briefs.append(
            _candidate_brief(
                cand, decision, outcome, drafts[cand.variant], rows[0]["delta_S"] if rows else None
            )
        )
    gain = next((d.delta_S or 0.0 for c, d in zip(cands, decisions, strict=True) if c is winner), 0.0)
    learned = () if winner is None or winner.ev is None else tuple(lessons_learned(
        ctx.worlds, ctx.checks, inc_ev, winner.ev, ctx.analysis, [x["world_id"] for x in ctx.lessons]))
    judged = Judged(tuple(new_rows), tuple(scoreboard), gain, winner.variant if winner else None, learned)
    ctx.round = dataclasses.replace(ctx.round, judged=judged)
    summary = {
        "t": t,
        "b_t": rnd.b_t,
        "sigma": rnd.sigma,
        "delta": rnd.delta,
        "S_star": rnd.S_star,
        "worlds": ctx.worlds,
        "failing": list(rnd.failing),
        "fresh": ctx.fresh,
        "prune": [pt.component for pt in rnd.prune],
        "incumbent": incumbent.to_json(),
        "candidates": briefs,
        "winner": winner.variant if winner else None,
        "failure_modes": [m.get("mode") for m in ctx.analysis.get("failure_modes", [])][:5],
        "lessons": ctx.lessons,
        "learned": [{"world_id": x.world_id, "lesson": x.lesson} for x in learned],
    }
    result = ConsolidationResult(
        "kept",
        "no candidate beat the current harness under the RRSI rules",
        None,
        ctx.start_version,
        ctx.start_version,
        round=summary,
        signals=dict(ctx.signals_read),
        seconds=time.monotonic() - t0,
        usage=ctx.usage,
        run_id=run_id,
    )
    if winner is not None:
        assert winner.payload is not None
        result.status, result.adopted = "adopted", True
        result.version, result.payload = str(winner.payload["version"]), dict(winner.payload)
        result.reason = f"variant {winner.variant} adopted ({gain:+.4f})"
    return Next("final", ctx, result=result)
