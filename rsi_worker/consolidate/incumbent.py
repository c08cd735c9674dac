"""Measuring the incumbent and setting up the round (docs/algorithm/consolidation.md §3.3 steps 8–11)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rsi_common.db import get_agent, replay_rows, set_run_params
from rsi_common.kinds import K_ENABLED_PRODUCTION
from rsi_common.math import (
    EditRecord,
    EvalResult,
    edit_budget,
    exploration,
    prune_set,
    reserved_variants,
    stall_flag,
    tried,
    valid_measurement,
)
from rsi_common.math.calibrate import calibrate
from rsi_worker.consolidate.context import Deps, RoundContext, load_harness, load_worlds
from rsi_worker.consolidate.evaluate import INCUMBENT, assemble
from rsi_worker.consolidate.outcome import Next
from rsi_worker.consolidate.refining import focus_line
from rsi_worker.consolidate.result import ConsolidationResult
from rsi_worker.consolidate.round import IncumbentBrief, Round, RoundParams
from rsi_worker.consolidate.spend import charge, usage_tokens
from rsi_worker.consolidate.state import ConsolidationState
from rsi_worker.consolidate.trials import row_json
from rsi_worker.roles.analyst import View, analyze

__all__ = ["FAIL_BELOW", "after_incumbent", "incumbent_brief", "round_parameters", "views_of"]

FAIL_BELOW = 1 - 1e-9


def records_of(state: ConsolidationState) -> list[EditRecord]:
    """The stored history rows as :class:`EditRecord` values (extra keys ignored)."""
    return [EditRecord.from_json(r) for r in state.records]


def incumbent_brief(ev: EvalResult, rows: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The round summary's ``incumbent`` entry (:class:`IncumbentBrief` JSON)."""
    return IncumbentBrief.of(ev, rows).to_json()


def round_parameters(
    ctx: RoundContext,
    state: ConsolidationState,
    inc_ev: EvalResult,
    enabled_kinds: Sequence[str],
    deps: Deps,
    failing: Sequence[str] = (),
) -> RoundParams:
    """docs/algorithm/consolidation.md §3.3 step 10: unit, δ, S★, b_t, σ_t, enabled, tried, exploration,
    reserved, prune."""
    p = deps.params
    total_w = sum(w for tr in inc_ev.per_task.values() for w in tr.weight_list())
    unit = 1.0 / max(1.0, total_w)
    cal = calibrate([inc_ev], z=p.delta_z)
    delta = max(cal.delta, unit)
    t = ctx.t
    b_t = edit_budget(min(t, p.T), p.T, p.b_min, p.b_max)
    sigma = stall_flag(state.progress, t, p.w, delta)
    enabled = [k for k in K_ENABLED_PRODUCTION if k in enabled_kinds]
    prior = [r for r in records_of(state) if r.t is None or r.t < t]
    tried_kinds = sorted(tried(prior))
    expl = exploration(sigma, tried_kinds, p.m_draft, enabled=enabled)
    return RoundParams(
        unit=unit,
        calibration=cal,
        delta=delta,
        S_star=inc_ev.S,
        S_t=inc_ev.S,
        b_t=b_t,
        sigma=sigma,
        enabled=tuple(enabled),
        tried=tuple(tried_kinds),
        exploration=expl,
        reserved=tuple(sorted(reserved_variants(p.m, p.m_draft, sigma, expl.untried))),
        prune=tuple(prune_set(prior, t, p.n_prune)),
        failing=tuple(failing),
    )


def _pick(rows: Sequence[Mapping[str, Any]], worst: bool) -> Mapping[str, Any] | None:
    usable = [r for r in rows if r["status"] != "cancelled"]
    if not usable:
        return None
    key = [(float(r.get("reward") or 0.0) if r["status"] == "ok" else -1.0, int(r["trial"])) for r in usable]
    order = sorted(range(len(usable)), key=lambda i: (key[i][0] if worst else -key[i][0], key[i][1]))
    return usable[order[0]]


def views_of(
    ctx: RoundContext, worlds: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], inc_ev: EvalResult
) -> list[View]:
    """docs/algorithm/consolidation.md §3.3 step 11: per world of W, its worst incumbent trial if failing,
    else its best."""
    views: list[View] = []
    for wid in ctx.worlds:
        if wid not in worlds:
            continue
        mean = inc_ev.per_task[wid].mean if wid in inc_ev.per_task else 0.0
        mine = [r for r in rows if r["world_id"] == wid]
        views.append(
            View(
                world=worlds[wid],
                row=_pick(mine, worst=mean < FAIL_BELOW),
                checks=ctx.checks.get(wid, []),
                mean=mean,
            )
        )
    return views


def after_incumbent(deps: Deps, ctx: RoundContext) -> Next:
    """Steps 8–11: measure the incumbent, decide ``failed``/``kept`` or set up the round.

    Returns a final ``Next`` or ``drafts`` with the variant labels to draft.
    """
    t0 = time.monotonic()
    p, run_id = deps.params, ctx.run_id
    with deps.sessions() as session:
        session.connection(execution_options={"sqlite_begin": "DEFERRED"})  # a read: no write turn
        state = ConsolidationState.from_json(get_agent(session, ctx.agent_id).state)
        rows = [row_json(r) for r in replay_rows(session, run_id, INCUMBENT)]
        worlds = load_worlds(session, ctx.worlds, ctx.agent_id)
        incumbent = load_harness(session, ctx.agent_id, ctx.start_version)
        session.commit()  # end the read transaction (keeps loaded rows usable)
    inc_ev = assemble(ctx.worlds, ctx.checks, rows, p.k, "incumbent").ev
    assert inc_ev is not None
    if not valid_measurement(inc_ev, p.invalid_missing_frac):
        reason = (
            f"the current harness could not be replayed ({inc_ev.missing}/{inc_ev.n_expected} trials failed)"
        )
        info = {"t": ctx.t, "worlds": ctx.worlds, "incumbent": incumbent_brief(inc_ev, rows)}
        return Next(
            "final",
            ctx,
            result=ConsolidationResult(
                "failed",
                reason,
                None,
                ctx.start_version,
                ctx.start_version,
                round=info,
                signals=dict(ctx.signals_read),
                seconds=time.monotonic() - t0,
                usage=ctx.usage,
                run_id=run_id,
            ),
        )
    failing = [w for w in ctx.worlds if inc_ev.per_task[w].mean < FAIL_BELOW]
    if not failing:
        ctx.round = Round(IncumbentBrief.of(inc_ev, rows), inc_ev)
        return Next(
            "final",
            ctx,
            result=ConsolidationResult(
                "kept",
                "the current harness already meets every criterion on these turns",
                None,
                ctx.start_version,
                ctx.start_version,
                signals=dict(ctx.signals_read),
                seconds=time.monotonic() - t0,
                usage=ctx.usage,
                run_id=run_id,
            ),
        )
    kinds = incumbent.manifest.enabled_kinds
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rsi-round-params") as pool:
        # δ's bootstrap (CPU, tens of ms) runs while the analyst's call waits for the model: off the
        # run's critical chain (docs/performance/consolidation.md#a-runs-cost-counted); neither reads
        # what the other computes
        pending = pool.submit(round_parameters, ctx, state, inc_ev, kinds, deps, failing)
        analyst = deps.role(ctx, "analyst")
        analysis = analyze(analyst, views_of(ctx, worlds, rows, inc_ev), state.analysis,
                           focus=focus_line(ctx.refine))
        ctx.usage["analyst"] = analyst.usage()
        charge(deps, ctx.agent_id, usage_tokens({"analyst": ctx.usage["analyst"]}))
        params = pending.result()
    ctx.round = Round(IncumbentBrief.of(inc_ev, rows), inc_ev, params)
    ctx.analysis = analysis
    ctx.phase = "drafting"
    with deps.sessions() as session:
        set_run_params(session, run_id, ctx.to_json())
        session.commit()
    return Next("drafts", ctx, variants=list("ABCDEFGH"[: p.m]))
