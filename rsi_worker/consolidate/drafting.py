"""Drafting the round's candidates (docs/algorithm/consolidation.md §3.3 step 12) and launching each one's
replays (step 13)
as soon as its draft passed (docs/architecture.md#one-consolidation-on-the-cluster).

Idempotency: a draft is stored under its variant label in ``rsi_runs.drafts`` with a read-merge-write
that swaps the stored text (``rsi_common.db.run_fields``); a redelivered draft task finds its label
stored and returns that draft without calling the proposer again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rsi_common.db import get_agent, replay_rows
from rsi_common.db.run_fields import merge_running_field
from rsi_worker.consolidate.context import Deps, RoundContext, load_harness, load_worlds
from rsi_worker.consolidate.draft import Draft, DraftContext, draft_candidate
from rsi_worker.consolidate.evaluate import INCUMBENT, TrialSlot, bound_total, plan_candidate
from rsi_worker.consolidate.incumbent import views_of
from rsi_worker.consolidate.refining import focus_line
from rsi_worker.consolidate.screen_inputs import screen_inputs
from rsi_worker.consolidate.spend import charge, over_cap, usage_tokens
from rsi_worker.consolidate.state import ConsolidationState
from rsi_worker.consolidate.trials import row_json
from rsi_worker.consolidate.waves import wave_size

__all__ = ["draft_and_launch", "draft_step", "launch_candidate", "store_draft"]


def _draft_context(deps: Deps, ctx: RoundContext) -> DraftContext:
    with deps.sessions() as session:
        session.connection(execution_options={"sqlite_begin": "DEFERRED"})  # a read: no write turn
        state = ConsolidationState.from_json(get_agent(session, ctx.agent_id).state)
        rows = [row_json(r) for r in replay_rows(session, ctx.run_id, INCUMBENT)]
        loaded = load_worlds(session, list(dict.fromkeys([*ctx.loaded, *ctx.worlds])), ctx.agent_id)
        incumbent = load_harness(session, ctx.agent_id, ctx.start_version)
        screen = screen_inputs(session, ctx.agent_id, focus_line(ctx.refine))
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
        screen=screen,
    )


def store_draft(deps: Deps, run_id: str, agent_id: str, draft: dict[str, Any]) -> dict[str, Any]:
    """Store one draft unless its label is stored already; returns the stored draft. A
    read-merge-write whose write turn holds one ``UPDATE`` (``merge_running_field``); a closed run
    stores nothing and ``draft`` is returned."""
    label = draft["variant"]

    def merge(drafts: Any) -> Any:
        if isinstance(drafts, dict) and label in drafts:
            return drafts  # stored already: nothing to write
        return {**(drafts or {}), label: draft}

    drafts, _ = merge_running_field(deps.sessions, run_id, "drafts", merge)
    stored = (drafts or {}).get(label, draft)
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


def launch_candidate(deps: Deps, ctx: RoundContext, variant: str) -> list[TrialSlot]:
    """Step 13 for one drafted variant that passed the precheck and critic, as soon as its draft is
    stored: its early-stop bound hash in Redis and its replay slots (ordered by
    :func:`plan_candidate`). No slots when the spend cap is reached (the judge then ends the run as
    ``skipped``) or the run closed meanwhile.

    Idempotent: the bound hash is created once (``init_bounds``); the slots are stored under the
    variant in ``rsi_runs.params.slots`` with a read-merge-write that swaps the stored text (the
    candidates launch concurrently: ``merge_running_field``), and the trials they name are keyed rows.
    """
    if over_cap(deps, ctx.agent_id) is not None:
        return []
    run_id, p, rnd = ctx.run_id, deps.params, ctx.round.set_up()
    if ctx.early_stop:
        deps.coord.init_bounds(run_id, variant, bound_total(ctx.worlds, ctx.checks, p.k),
                               rnd.S_star, rnd.delta, rnd.S_t)
    slots = plan_candidate(variant, ctx.worlds, p.k, checks=ctx.checks, failing=rnd.failing, fresh=ctx.fresh)

    def merge(params: Any) -> Any:
        stored = RoundContext.from_json(params or {})
        stored.slots[variant] = [s.to_json() for s in slots]
        stored.phase = "candidates"
        return stored.to_json()

    _, open_ = merge_running_field(deps.sessions, run_id, "params", merge)  # one UPDATE in the write turn
    return slots if open_ else []


def draft_and_launch(deps: Deps, ctx: RoundContext, drafts: Mapping[str, Any], variant: str
                     ) -> dict[str, Any]:
    """Steps 12–13 for one variant: the ``drafts`` member of the state machine (``flow.run_draft``).

    Returns the variant's stored draft (drafted now, or the stored one) and, when it passed the
    precheck and critic, ``"slots"``: its trial slots (JSON), the member's follow-on trials, and
    ``"wave"``: how many of them form the first wave (``waves.wave_size``) — the
    cluster's ``draft_candidate`` task replaces itself with them, the inline driver submits them to
    its pool. A redelivery finds its draft and slots stored and launches the same keyed trials.
    """
    draft = draft_step(deps, ctx, drafts, variant)
    if draft.get("gate") is not None or not draft.get("payload"):
        return draft
    slots = launch_candidate(deps, ctx, variant)
    return {**draft, "slots": [s.to_json() for s in slots], "wave": wave_size(deps, ctx, slots)}
