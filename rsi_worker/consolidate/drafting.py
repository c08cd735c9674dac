"""Drafting the round's candidates (SPEC §3.3 step 12) and launching their replays (step 13).

Idempotency: a draft is stored under its variant label in ``rsi_runs.drafts`` with a locked
read-merge-write; a redelivered draft task finds its label stored and returns that draft without
calling the proposer again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rsi_common.db import get_agent, get_run, lock_agent, replay_rows, set_run_drafts, set_run_params
from rsi_worker.consolidate.context import Deps, RoundContext, load_harness, load_worlds
from rsi_worker.consolidate.draft import Draft, DraftContext, draft_candidate
from rsi_worker.consolidate.evaluate import INCUMBENT, TrialSlot, bound_total, plan_candidate
from rsi_worker.consolidate.incumbent import views_of
from rsi_worker.consolidate.outcome import Next
from rsi_worker.consolidate.spend import charge, over_cap, usage_tokens
from rsi_worker.consolidate.state import ConsolidationState
from rsi_worker.consolidate.trials import row_json

__all__ = ["draft_step", "interleave", "launch_candidates", "store_draft"]


def _draft_context(deps: Deps, ctx: RoundContext) -> DraftContext:
    with deps.sessions() as session:
        state = ConsolidationState.from_json(get_agent(session, ctx.agent_id).state)
        rows = [row_json(r) for r in replay_rows(session, ctx.run_id, INCUMBENT)]
        loaded = load_worlds(session, list(dict.fromkeys([*ctx.loaded, *ctx.worlds])), ctx.agent_id)
        incumbent = load_harness(session, ctx.agent_id, ctx.start_version)
        session.commit()  # end the read transaction (keeps loaded rows usable)
    _, inc_ev = ctx.round.measured()
    rnd = ctx.round.set_up()
    analysis = (
        ctx.analysis
        if ctx.analysis.get("failure_modes") or ctx.analysis.get("success_habits")
        else state.analysis
    )
    return DraftContext(
        incumbent=incumbent,
        t=ctx.t,
        b_t=rnd.b_t,
        S_t=rnd.S_t,
        delta=rnd.delta,
        params=deps.params,
        records=[r for r in state.records if r.get("t") is None or r["t"] < ctx.t],
        scoreboard=state.scoreboard,
        analysis=analysis,
        exploration=rnd.exploration,
        reserved=frozenset(rnd.reserved),
        prune=list(rnd.prune),
        enabled=rnd.enabled,
        views=views_of(ctx, loaded, rows, inc_ev),
        worlds=list(loaded.values()),
    )


def store_draft(deps: Deps, run_id: str, agent_id: str, draft: dict[str, Any]) -> dict[str, Any]:
    """Store one draft unless its label is stored already; returns the stored draft."""
    with deps.sessions() as session:
        lock_agent(session, agent_id)
        run = get_run(session, run_id, for_update=True)
        drafts = dict(run.drafts or {})
        stored = drafts.setdefault(draft["variant"], draft)
        if stored is draft:
            set_run_drafts(session, run_id, drafts)
        session.commit()
    return dict(stored)


def draft_step(deps: Deps, ctx: RoundContext, drafts: Mapping[str, Any], variant: str) -> dict[str, Any]:
    """Draft one variant of a running run (or return its stored draft): the ``drafts`` member of the
    state machine (``flow.run_draft``), run after its lease check; ``drafts``: the stored ones."""
    run_id = ctx.run_id
    stored = drafts.get(variant)
    if stored is not None:
        return dict(stored)
    if over_cap(deps, ctx.agent_id) is not None:  # the launch step ends the run as skipped
        gated = Draft(variant=variant, gate="no_proposal", detail="spend cap reached: not drafted")
        return store_draft(deps, run_id, ctx.agent_id, gated.to_json())
    dctx = _draft_context(deps, ctx)
    proposer, critic = deps.role(ctx, "proposer"), deps.role(ctx, "critic")
    draft: Draft = draft_candidate(dctx, variant, "ABCDEFGH".index(variant), proposer=proposer, critic=critic)
    stored = store_draft(deps, run_id, ctx.agent_id, draft.to_json())
    if stored.get("usage") == draft.usage:  # ours was stored (a redelivered draft charges nothing)
        charge(deps, ctx.agent_id, usage_tokens(draft.usage))
    return stored


def interleave(per_candidate: Sequence[Sequence[TrialSlot]]) -> list[TrialSlot]:
    """The candidates' slots in dispatch order: round-robin over the candidates (A₁ B₁ A₂ B₂ …).

    Only the order in which trials are enqueued changes (decisions are assembled from stored rows
    per candidate). Candidate by candidate, a cluster with at least k·|W| free threads starts every
    trial of a candidate at once, so the exact-bound early stop (SPEC §2.10) can never cancel a
    queued trial of a hopeless candidate; round-robin puts a share of every candidate in each wave
    of trials, and the failures of the first wave cancel the hopeless candidate's later slots.
    """
    out: list[TrialSlot] = []
    for i in range(max((len(s) for s in per_candidate), default=0)):
        out.extend(s[i] for s in per_candidate if i < len(s))
    return out


def launch_candidates(deps: Deps, ctx: RoundContext) -> Next:
    """Step 13: bound hashes and replay slots for every live draft; ``judge`` when none is live."""
    run_id = ctx.run_id
    with deps.sessions() as session:
        drafts = dict(get_run(session, run_id).drafts or {})
        session.commit()  # end the read transaction (keeps loaded rows usable)
    p = deps.params
    live = [v for v in sorted(drafts) if drafts[v].get("gate") is None and drafts[v].get("payload")]
    rnd = ctx.round.set_up() if live else None
    per_candidate: list[list[TrialSlot]] = []
    for v in live:
        if ctx.early_stop and rnd is not None:
            deps.coord.init_bounds(
                run_id, v, bound_total(ctx.worlds, ctx.checks, p.k), rnd.S_star, rnd.delta, rnd.S_t
            )
        mine = plan_candidate(v, ctx.worlds, p.k)
        ctx.slots[v] = [s.to_json() for s in mine]
        per_candidate.append(mine)
    slots = interleave(per_candidate)
    ctx.phase = "candidates"
    with deps.sessions() as session:
        set_run_params(session, run_id, ctx.to_json())
        session.commit()
    return Next("trials" if slots else "judge", ctx, slots=slots)
