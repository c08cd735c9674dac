"""The final write of a run (docs/algorithm/consolidation.md §3.3 step 18, §3.12.7–8) and the state it saves.

The saved state is rebuilt here from the run's stored context and rows, never carried in memory
between steps: start state → seen digests, incumbent replays cached, the analysis, merged verdicts,
the round's records / scoreboard / progress, the winner's replays cached, caches pruned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

import sqlalchemy as sa

from rsi_common.coord import Lease
from rsi_common.db import (
    Adoption,
    db_now,
    final_write,
    finish_run,
    get_agent,
    get_run,
    replay_rows,
    run_id_at_fence,
)
from rsi_common.db.engine import encode_json
from rsi_common.errors import CoordinationError
from rsi_common.handoff import COORD_ERRORS
from rsi_common.stored import StoredDataError, error_record, safe_text
from rsi_worker.consolidate.context import Deps, RoundContext
from rsi_worker.consolidate.evaluate import INCUMBENT
from rsi_worker.consolidate.join import JoinStep
from rsi_worker.consolidate.result import ConsolidationResult, Status, merge_usage
from rsi_worker.consolidate.spend import spend_summary
from rsi_worker.consolidate.state import ConsolidationState, prune_cache, remember, trim_records
from rsi_worker.consolidate.tree_spend import charge_root, run_root
from rsi_worker.consolidate.trials import row_json

__all__ = [
    "Settled", "build_state", "close_lease", "failed_result", "finalize", "interrupt", "release", "run_of",
    "run_usage", "settle", "settle_lease",
]

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
    """The state to save for ``result`` (``None`` = leave the stored one: ``failed``/``skipped``, and a
    run without a round whose ``seen`` digests are unchanged — the usual no-signal run, which then
    writes its run row only: docs/performance/consolidation.md#the-no-signal-path)."""
    if result.status not in SAVES_STATE:
        return None
    if ctx.round.empty and not ctx.analysis and not rows:
        return start.to_json() if start.set_seen(ctx.digests, ctx.loaded) else None
    p = deps.params
    state = start  # freshly loaded by the caller and not shared: no defensive copy
    for r in rows:  # verdict cache entries travel in the trial rows (docs/algorithm/consolidation.md §3.6.2)
        for key, verdict in ((r.get("result") or {}).get("new_verdicts") or {}).items():
            state.verdicts[key] = list(verdict)
    if ctx.round.inc_ev is not None:
        remember(state, ctx.inc_version, _replays_by_world(rows, INCUMBENT), p.k)
    if ctx.analysis:
        state.set_analysis(ctx.analysis)
    judged = ctx.round.judged
    keep = [ctx.inc_version]
    if judged is not None:
        t = ctx.t
        state.records = trim_records([*state.records, *judged.records], t + 1, p.history_rounds)
        state.add_scoreboard(judged.scoreboard)
        state.advance_round(t, judged.gain)
    if result.adopted and result.version is not None and judged is not None and judged.winner is not None:
        remember(state, result.version, _replays_by_world(rows, judged.winner), p.k)
        keep = [result.version, ctx.inc_version]
    prune_cache(state, keep, p.cache_versions, p.verdict_cache)
    state.set_seen(ctx.digests, ctx.loaded)
    return state.to_json()


def _lesson_entries(session: Any, ctx: RoundContext) -> list[dict[str, Any]]:
    """The lessons the winner learned, with a copy of each world (docs/consolidation/regression.md),
    encoded here: before the final write's turn."""
    from rsi_worker.consolidate.context import load_world

    out = []
    for item in ctx.round.judged.learned if ctx.round.judged is not None else ():
        world = load_world(session, item.world_id, ctx.agent_id)
        if world is not None:
            out.append({**item.to_json(), "world": encode_json(world.data), "signals": world.signals,
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
    if ctx.skipped_worlds and not result.skipped_worlds:
        result.skipped_worlds = dict(ctx.skipped_worlds)
    # Reads and the new state's computation in a read transaction (deferred on SQLite: no write
    # turn held while Python works); the write transaction then holds the write turn only for the
    # fenced compare-and-swap. Safe because only fenced writes change the state: one that lands in
    # between (a newer fence) makes final_write answer ``superseded`` and write no state
    # (docs/performance/consolidation.md#short-write-transactions).
    with deps.sessions() as session:
        session.connection(execution_options={"sqlite_begin": "DEFERRED"})
        start = ConsolidationState.from_json(get_agent(session, ctx.agent_id).state)
        # a run that ended while opening has no trial rows (the no-signal path saves the read)
        rows = [] if ctx.phase == "open" else [row_json(r) for r in replay_rows(session, ctx.run_id)]
        run = get_run(session, ctx.run_id)
        drafts = dict(run.drafts or {})
        started_at = run.started_at
        lessons = _lesson_entries(session, ctx) if result.adopted else []
        root = run_root(session, ctx.agent_id)  # the tree charge's read, out of the write turn
        session.commit()
    result.usage = run_usage(ctx, rows, drafts)
    result.spend = {**spend_summary(result.usage, rows), **result.spend}
    result.state = build_state(deps, ctx, result, start, rows)
    # every document encoded and every read done before the write turn, which then holds only the
    # fenced compare-and-swap's statements and the tree charge's insert
    # (docs/performance/consolidation.md#short-write-transactions)
    state = encode_json(result.state) if result.state is not None else None
    adoption = None
    if result.adopted and result.payload is not None and result.version is not None:
        adoption = Adoption(result.version, encode_json(result.payload), summary=None,
                            regressions=lessons, regression_bound=deps.params.regression_worlds)
    with deps.sessions() as session:  # the database clock, read without the write turn
        session.connection(execution_options={"sqlite_begin": "DEFERRED"})
        now = session.execute(sa.select(db_now())).scalar_one()
        session.commit()
    # the run's wall time, to the moment its write is asked for; the summary carries it
    result.seconds = max(0.0, (now - started_at).total_seconds())
    summary = encode_json(result.summary())  # also the harness row's summary (Adoption.summary=None)
    with deps.sessions() as session:
        written = final_write(
            session,
            ctx.run_id,
            status=result.status,
            reason=result.reason,
            result=summary,
            state=state,
            adoption=adoption,
            error=result.error,
        )
        if root is not None:  # run:{run}
            charge_root(session, root, ctx.agent_id, ctx.run_id, int(result.spend.get("tokens") or 0),
                        now.strftime("%Y-%m-%d"))
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
    return result, close_lease(deps, ctx, result, sorted(drafts))


def close_lease(
    deps: Deps, ctx: RoundContext, result: ConsolidationResult, drafts: list[str], *, run_keys: bool = True,
    finish: Callable[[Deps, Lease], Lease | None] | None = None,
) -> Lease | None:
    """After the final write: drop the run keys (best effort: they expire anyway), release the lease
    or hand it to the re-run of a pending turn (``finish`` is the last step that can fail, so a
    re-run lease it returns is never lost), count the run. ``run_keys=False``: the run made no run
    key (a quiet run: its id was never handed to a step), so none is deleted (one Redis round trip
    fewer). ``finish``: how the lease is finished (``deps.coord.finish``'s answer; the quiet run's is
    ``quiet_lease.finish``)."""
    if run_keys:
        try:
            deps.coord.cleanup_run(ctx.run_id, drafts, get_args(JoinStep))
        except COORD_ERRORS as exc:
            log.warning("run %s: run keys not deleted (%s); they expire", ctx.run_id, type(exc).__name__)
    lease = Lease(ctx.agent_id, ctx.token, ctx.fence, ctx.io_id or "")
    nxt = deps.coord.finish(lease) if finish is None else finish(deps, lease)
    try:
        deps.metrics.run_finished(result.summary(), rerun=nxt is not None)
    except Exception as exc:  # a metrics hook never loses the re-run
        log.warning("run %s: metrics hook failed: %s", ctx.run_id, type(exc).__name__)
    log.info("run %s closed: %s", ctx.run_id, result.status, extra={
        "run_id": ctx.run_id, "agent_id": ctx.agent_id, "status": result.status, "rerun": nxt is not None})
    return nxt


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
    """The ``failed`` result of a run stopped by an exception (its state is left unchanged); the
    error record never echoes a secret (``stored.error_record``)."""
    return ConsolidationResult("failed", f"the run failed: {type(exc).__name__}", None, ctx.start_version,
                               ctx.start_version, signals=dict(ctx.signals_read), seconds=seconds,
                               usage=ctx.usage, run_id=ctx.run_id, error=dict(error_record(exc)),
                               skipped_worlds=dict(ctx.skipped_worlds))


def settle(
    deps: Deps, run_id: str, exc: BaseException, lease: Lease | None = None
) -> tuple[ConsolidationResult | None, Lease | None]:
    """Close a run a step could not finish, and never leave its lease behind
    (``docs/operations/failure-recovery.md``, *Step exceptions*).

    * Lease lost (``CoordinationError``): the run is closed ``interrupted``; nothing else is written
      and the lease is not touched (it is not ours).
    * Otherwise the run is recorded ``failed`` with ``{type, message}`` through the fenced final
      write, and the lease is released or handed to exactly one re-run of a pending turn. If that
      write fails too (e.g. the failure's own data cannot be stored), a minimal ``failed`` record
      is written instead, and the lease is released or handed on all the same.
    * A run found closed already (its final write went through, then something failed) only has
      its lease released or handed on, if it is still held.

    The lease is, in this order: ``lease`` when the caller holds it (the ``consolidate`` task and
    the inline driver), the token stored on the run row when it was opened, or the Redis holder of
    the run's fence (while a lease exists, the fence counter is its holder's fence).

    Returns:
        ``(result, rerun)``: the result written (``None`` when the run was closed already) and the
        re-run's lease when a turn is pending (the caller starts it).
    """
    if isinstance(exc, CoordinationError):
        interrupt(deps, run_id, safe_text(exc, 300))
        return None, None
    with deps.sessions() as session:
        run = get_run(session, run_id)
        params, status, fence = dict(run.params or {}), run.status, run.fence
        agent_id, io_id = run.agent_id, run.io_id
        session.commit()
    if fence is None:
        return None, None
    held = _held_lease(deps, agent_id, fence, io_id, params, lease)
    if status != "running":
        return None, release(deps, held)
    ctx = _stored_context(params, run_id) or RoundContext(
        run_id=run_id, agent_id=agent_id, fence=fence, token="", io_id=io_id)
    ctx.token = held.token if held is not None else ""
    try:
        return finalize(deps, ctx, failed_result(ctx, exc))
    except Exception as second:
        log.warning("run %s: the failed result could not be written (%s); writing a minimal one", run_id,
                    type(second).__name__)
        return _minimal_failure(deps, ctx, exc), release(deps, held)


def _stored_context(params: Mapping[str, Any], run_id: str) -> RoundContext | None:
    """The run's stored context, or ``None`` when the row has none of its own or it does not read
    (the run is then closed from its row alone; the step's error names the bad field)."""
    if params.get("run_id") != run_id:
        return None
    try:
        return RoundContext.from_json(params)
    except StoredDataError as exc:
        log.warning("run %s: stored context not readable (%s)", run_id, safe_text(exc, 200))
        return None


def _held_lease(deps: Deps, agent_id: str, fence: int, io_id: str | None, params: Mapping[str, Any],
                lease: Lease | None) -> Lease | None:
    """The lease of the run with ``fence`` (see :func:`settle`), or ``None`` if it is not findable."""
    if lease is not None and lease.agent == agent_id and lease.fence == fence:
        return lease
    token = params.get("token")
    if isinstance(token, str) and token:
        return Lease(agent_id, token, fence, io_id or "")
    try:
        holder = deps.coord.lease_holder(agent_id)
    except COORD_ERRORS as exc:
        log.warning("agent %s: lease holder unknown (%s)", agent_id, type(exc).__name__)
        return None
    return Lease(agent_id, holder.token, fence, io_id or "") if holder and holder.fence == fence else None


def release(deps: Deps, lease: Lease | None) -> Lease | None:
    """``finish`` the lease if it is still held: released, or the re-run's lease of a pending turn.
    A Redis failure is logged: the lease then expires and the sweeper resumes the pending turn."""
    if lease is None:
        return None
    try:
        return deps.coord.finish(lease)
    except COORD_ERRORS as exc:
        log.warning("agent %s: lease not released (%s); it expires, the sweeper resumes", lease.agent,
                    type(exc).__name__)
        return None


@dataclass(frozen=True)
class Settled:
    """What :func:`settle_lease` did: the result written (``None`` when the run was closed already or
    never opened), the re-run's lease of a pending turn, and whether the run had opened its row."""

    result: ConsolidationResult | None
    rerun: Lease | None
    opened: bool


def settle_lease(deps: Deps, lease: Lease, exc: BaseException) -> Settled:
    """:func:`settle` for a caller that holds ``lease`` (the ``consolidate`` task, the inline driver)
    and may not know the run id: the run of the lease's fence is closed, or — when the run never
    opened its row, or the database cannot even say — the lease is released or handed on at once,
    so it never waits for its TTL."""
    try:
        run_id = run_of(deps, lease.agent, lease.fence)
    except Exception as lookup:
        log.warning("run of %s: row unknown (%s); releasing the lease", lease.agent, type(lookup).__name__)
        return Settled(None, release(deps, lease), False)
    if run_id is None:
        return Settled(None, release(deps, lease), False)
    try:
        result, rerun = settle(deps, run_id, exc, lease)
    except Exception as again:  # e.g. the database failed as well; the sweeper closes the row later
        log.warning("run %s: not settled (%s); releasing the lease", run_id, type(again).__name__)
        return Settled(None, release(deps, lease), True)
    return Settled(result, rerun, True)


def run_of(deps: Deps, agent_id: str, fence: int) -> str | None:
    """The id of the run row of ``(agent, fence)``, or ``None`` when the run never opened its row."""
    with deps.sessions() as session:
        run_id = run_id_at_fence(session, agent_id, fence)
        session.commit()
    return run_id


def _minimal_failure(deps: Deps, ctx: RoundContext, exc: BaseException) -> ConsolidationResult | None:
    """Record ``failed`` with nothing but the status, reason and error record (the fenced write);
    ``None`` if even that is impossible (the sweeper closes the run once its lease is gone)."""
    error = dict(error_record(exc))
    reason = f"the run failed: {type(exc).__name__}"
    summary = {"status": "failed", "reason": reason, "run_id": ctx.run_id, "error": error}
    try:
        with deps.sessions() as session:
            written = final_write(session, ctx.run_id, status="failed", reason=reason, result=summary,
                                  error=error)
            session.commit()
    except Exception as third:
        log.error("run %s: not even a minimal failed record could be written (%s)", ctx.run_id,
                  type(third).__name__)
        return None
    status: Status = "failed" if written.applied else "interrupted"
    try:
        deps.metrics.run_finished({"status": status})
    except Exception as exc:
        log.warning("run %s: metrics hook failed: %s", ctx.run_id, type(exc).__name__)
    return ConsolidationResult(status, reason, None, ctx.start_version, ctx.start_version, run_id=ctx.run_id,
                               error=error)
