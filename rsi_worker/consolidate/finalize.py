"""The final write of a run (SPEC §3.3 step 18, §3.12.7–8) and the state it saves.

The saved state is rebuilt here from the run's stored context and rows, never carried in memory
between steps: start state → seen digests, incumbent replays cached, the analysis, merged verdicts,
the round's records / scoreboard / progress, the winner's replays cached, caches pruned.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from rsi_common.coord import Lease
from rsi_common.db import Adoption, db_now, final_write, finish_run, get_agent, get_run, replay_rows
from rsi_worker.consolidate.context import Deps, RoundContext
from rsi_worker.consolidate.evaluate import INCUMBENT
from rsi_worker.consolidate.result import ConsolidationResult, merge_usage
from rsi_worker.consolidate.spend import spend_summary
from rsi_worker.consolidate.state import ConsolidationState, prune_cache, remember, trim_records
from rsi_worker.consolidate.trials import row_json

__all__ = ["build_state", "finalize", "interrupt", "run_usage"]

log = logging.getLogger(__name__)
SAVES_STATE = ("recorded", "kept", "adopted")


def _replays_by_world(rows: Sequence[Mapping[str, Any]], candidate: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    mine = sorted((r for r in rows if r["candidate"] == candidate), key=lambda r: (r["world_id"], r["trial"]))
    for r in mine:
        if r["source"] == "replay" and r["status"] == "ok" and (r.get("result") or {}).get("replay"):
            out.setdefault(r["world_id"], []).append({**r["result"]["replay"], "trial": int(r["trial"])})
    return out


def build_state(
    deps: Deps,
    ctx: RoundContext,
    result: ConsolidationResult,
    start: ConsolidationState,
    rows: Sequence[Mapping[str, Any]],
) -> dict[str, Any] | None:
    """The state to save for ``result`` (``None`` = leave the stored one: ``failed``/``skipped``)."""
    if result.status not in SAVES_STATE:
        return None
    p = deps.params
    state = start  # freshly loaded by the caller and not shared: no defensive copy
    for r in rows:  # verdict cache entries travel in the trial rows (SPEC §3.6.2)
        for key, verdict in ((r.get("result") or {}).get("new_verdicts") or {}).items():
            state.verdicts[key] = list(verdict)
    if ctx.round.get("inc_ev"):
        remember(state, ctx.inc_version, _replays_by_world(rows, INCUMBENT), p.k)
    if ctx.analysis:
        state.set_analysis(ctx.analysis)
    judged = ctx.round.get("judged")
    keep = [ctx.inc_version]
    if judged is not None:
        t = ctx.t
        state.records = trim_records(state.records + judged["records"], t + 1, p.history_rounds)
        state.add_scoreboard(judged["scoreboard"])
        state.advance_round(t, float(judged["gain"]))
    if result.adopted and result.version is not None and judged is not None:
        remember(state, result.version, _replays_by_world(rows, judged["winner"]), p.k)
        keep = [result.version, ctx.inc_version]
    prune_cache(state, keep, p.cache_versions, p.verdict_cache)
    state.set_seen(ctx.digests, ctx.loaded)
    return state.to_json()


def _lesson_entries(session: Any, ctx: RoundContext) -> list[dict[str, Any]]:
    """The lessons the winner learned, with a copy of each world (docs/consolidation/regression.md)."""
    from rsi_worker.consolidate.context import load_world

    out = []
    for item in (ctx.round.get("judged") or {}).get("learned") or ():
        world = load_world(session, item["world_id"], ctx.agent_id)
        if world is not None:
            out.append({**item, "world": world.data, "signals": world.signals,
                        "interaction_id": world.interaction_id, "seq": world.seq})
    return out


def run_usage(
    ctx: RoundContext, rows: Sequence[Mapping[str, Any]], drafts: Mapping[str, Any]
) -> dict[str, dict[str, int]]:
    """Role tokens of the whole run: signal/analyst (context), judge (rows), proposer/critic (drafts)."""
    usage: dict[str, dict[str, int]] = {}
    merge_usage(usage, ctx.usage)
    for r in rows:
        merge_usage(usage, (r.get("result") or {}).get("usage"))
    for d in drafts.values():
        merge_usage(usage, d.get("usage"))
    return usage


def finalize(
    deps: Deps, ctx: RoundContext, result: ConsolidationResult
) -> tuple[ConsolidationResult, Lease | None]:
    """Write the result (fenced compare-and-swap), publish an adoption, release or hand on the lease.

    Returns:
        The result as written (``kept`` when a rollback won, ``interrupted`` when superseded) and
        the lease of exactly one re-run when a turn arrived meanwhile.
    """
    with deps.sessions() as session:
        start = ConsolidationState.from_json(get_agent(session, ctx.agent_id).state)
        rows = [row_json(r) for r in replay_rows(session, ctx.run_id)]
        run = get_run(session, ctx.run_id)
        drafts = dict(run.drafts or {})
        now = session.execute(sa.select(db_now())).scalar_one()
        result.seconds = max(0.0, (now - run.started_at).total_seconds())  # the run's wall time
        result.usage = run_usage(ctx, rows, drafts)
        result.spend = {**spend_summary(result.usage, rows), **result.spend}
        result.state = build_state(deps, ctx, result, start, rows)
        adoption = None
        if result.adopted and result.payload is not None and result.version is not None:
            adoption = Adoption(result.version, result.payload, summary=result.summary(),
                                regressions=_lesson_entries(session, ctx),
                                regression_bound=deps.params.regression_worlds)
        written = final_write(
            session,
            ctx.run_id,
            status=result.status,
            reason=result.reason,
            result=result.summary(),
            state=result.state,
            adoption=adoption,
            error=result.error,
        )
        session.commit()
    if written.outcome == "kept":
        result.status, result.reason = "kept", str(written.run.reason)
        result.adopted, result.version, result.payload, result.state = False, ctx.start_version, None, None
    elif written.outcome == "superseded":
        result.status, result.reason, result.state = (
            "interrupted",
            str(written.run.reason or "superseded"),
            None,
        )
    elif written.outcome == "adopted":
        _announce(deps, ctx.agent_id)
    deps.coord.cleanup_run(ctx.run_id, sorted(drafts))
    nxt = deps.coord.finish(Lease(ctx.agent_id, ctx.token, ctx.fence, ctx.io_id or ""))
    deps.metrics.run_finished(result.summary(), rerun=nxt is not None)
    log.info("run %s closed: %s", ctx.run_id, result.status, extra={
        "run_id": ctx.run_id, "agent_id": ctx.agent_id, "status": result.status, "rerun": nxt is not None})
    return result, nxt


def _announce(deps: Deps, agent_id: str) -> None:
    try:
        if deps.on_harness_change is not None:
            deps.on_harness_change(agent_id)
        else:
            deps.coord.publish_harness_change(agent_id)
    except Exception as exc:  # hosts fall back to the cache TTL
        log.warning("harness change of %s not published: %s", agent_id, type(exc).__name__)


def interrupt(deps: Deps, run_id: str, reason: str) -> bool:
    """Close a still-running run as ``interrupted`` (lease lost); nothing else is written."""
    with deps.sessions() as session:
        done = finish_run(
            session, run_id, "interrupted", reason=reason, result={"status": "interrupted", "reason": reason}
        )
        session.commit()
    if done:
        deps.metrics.run_finished({"status": "interrupted"})
    return done


def failed_result(ctx: RoundContext, exc: BaseException, seconds: float = 0.0) -> ConsolidationResult:
    """The ``failed`` result of a run stopped by an exception (its state is left unchanged)."""
    from rsi_common.errors import error_record

    return ConsolidationResult("failed", f"the run failed: {type(exc).__name__}", None, ctx.start_version,
                               ctx.start_version, signals=dict(ctx.signals_read), seconds=seconds,
                               usage=ctx.usage, run_id=ctx.run_id, error=dict(error_record(exc)))


def settle(deps: Deps, run_id: str, exc: BaseException) -> tuple[ConsolidationResult | None, Lease | None]:
    """Close a run a step could not finish: ``interrupted`` when the lease was lost (nothing else
    written), else ``failed`` through the fenced final write (the lease is released or handed on).

    Returns ``(None, None)`` when the run is not running any more.
    """
    from rsi_common.errors import CoordinationError

    if isinstance(exc, CoordinationError):
        interrupt(deps, run_id, str(exc)[:300])
        return None, None
    with deps.sessions() as session:
        run = get_run(session, run_id)
        ctx = RoundContext.from_json(run.params or {}) if run.params else None
        status, agent_id, fence, io_id = run.status, run.agent_id, run.fence, run.io_id
        session.commit()
    if status != "running" or fence is None:
        return None, None
    if ctx is None or not ctx.token:
        ctx = RoundContext(run_id=run_id, agent_id=agent_id, fence=fence, token="", io_id=io_id)
    return finalize(deps, ctx, failed_result(ctx, exc))
