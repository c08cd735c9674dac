"""Opening a run (docs/algorithm/consolidation.md §3.3 steps 1–7): the run row, signals, criteria, the
decision to open a round, W.

**Forced runs (project decision).** ``open_run(..., force=True)`` treats every scored world as
fresh: the ``seen`` digests of the stored state are ignored for this run only, so a run re-considers
the agent's signals even when none changed since the last completed run (``rsi batch`` after a model
change; otherwise such a run would end ``recorded`` "no new correction or problem to fix"). A round
still opens only if some scored world carries a negative signal. The run saves ``seen`` as usual, so
the next ordinary run compares against this one. ``kind`` is stored on the run row (``consolidate``
for host-triggered runs, ``batch:<name>`` for ``rsi batch``); re-runs for pending turns are never forced.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy.orm import Session

from rsi_common.coord import Lease
from rsi_common.db import get_agent, set_run_params, touch_regressions, update_signals
from rsi_common.db.engine import encode_json
from rsi_common.db.run_open import open_run_row
from rsi_common.db.runs import new_run_id
from rsi_common.errors import InvalidInput
from rsi_common.harness import H0_VERSION
from rsi_worker.consolidate.context import Deps, RoundContext
from rsi_worker.consolidate.evaluate import plan_incumbent
from rsi_worker.consolidate.outcome import Next, final
from rsi_worker.consolidate.refining import is_refine_io, operator_checks, refine_of, run_kind
from rsi_worker.consolidate.regression import add_lessons
from rsi_worker.consolidate.signals import checks_for, negative, unread_pairs
from rsi_worker.consolidate.spend import charge, usage_tokens
from rsi_worker.consolidate.state import EMPTY_DIGEST, ConsolidationState, signal_digest
from rsi_worker.consolidate.worlds import PoolWorld, WorldPool, needs_answer, select_worlds
from rsi_worker.roles.signal import implicit_signal

__all__ = ["KIND_CONSOLIDATE", "MAX_KIND_CHARS", "open_row", "open_step"]

_READ = {"sqlite_begin": "DEFERRED"}
"""Execution options of a read transaction (no write turn on SQLite, rsi_common/db/engine.py)."""
KIND_CONSOLIDATE = "consolidate"
"""Run kind of a host-triggered run (and of its re-runs)."""
MAX_KIND_CHARS = 32
"""Width of ``rsi_runs.kind``."""


def _policy(worlds: Sequence[PoolWorld], latest: PoolWorld | None, deps: Deps) -> tuple[str, str]:
    source = latest or (worlds[0] if worlds else None)
    if source is not None:
        provider = str(source.provider or deps.settings.default_provider)
        model = str(source.model or deps.settings.default_model)
        return provider, model
    return deps.settings.default_provider, deps.settings.default_model


def _read_implicit(deps: Deps, session: Session, ctx: RoundContext, pool: WorldPool) -> None:
    """Step 3: read the unread pairs' next messages; write each verdict to its world at once.

    The pairs are independent, so the reader's calls run concurrently (one thread per pair, at
    most ``signal_pairs``); the verdicts are written in pair order. A pair with a world whose
    record turned out bad is dropped (:class:`WorldPool`).
    """
    pairs = unread_pairs(pool.usable(), ctx.latest or "", deps.params.signal_pairs)
    texts = [(prev.request, prev.answer, cur.request) for prev, cur in pairs]  # read here: the
    session.commit()  # lazy records need the session, which the reader threads must not touch
    kept = [(p, t) for p, t in zip(pairs, texts, strict=True) if not {p[0].id, p[1].id} & set(pool.skipped)]
    pairs, texts = [p for p, _ in kept], [t for _, t in kept]
    if not pairs:
        return
    reader = deps.role(ctx, "signal")
    with ThreadPoolExecutor(max_workers=len(pairs)) as threads:
        verdicts = list(threads.map(lambda t: implicit_signal(reader, *t), texts))
    for (prev, _cur), verdict in zip(pairs, verdicts, strict=True):
        update_signals(session, ctx.agent_id, {"implicit": verdict}, world_id=prev.id)
        session.commit()
        prev.signals["implicit"] = verdict
        ctx.signals_read[prev.id] = dict(prev.signals)
    ctx.usage["signal"] = reader.usage()
    charge(deps, ctx.agent_id, usage_tokens({"signal": ctx.usage["signal"]}))


def open_step(deps: Deps, ctx: RoundContext) -> Next:
    """Steps 2–7 of a run whose row is open (:func:`open_row`): read signals, decide, pick W and plan
    the incumbent. Run by the state machine (``flow.open_run``) after its lease and spend checks.

    Returns a final ``Next`` (``skipped``/``recorded``) or ``trials`` with the incumbent's slots.
    """
    t0 = time.monotonic()
    params = deps.params
    with deps.sessions() as session:
        # reads take no write turn; each write below has a short transaction of its own
        # (docs/performance/consolidation.md#short-write-transactions)
        session.connection(execution_options=_READ)
        agent = get_agent(session, ctx.agent_id)
        if agent.frozen:
            return final(ctx, "skipped", "agent is frozen", t0)
        state = ConsolidationState.from_json(agent.state)
        ctx.t = state.t
        pool = WorldPool.latest(session, ctx.agent_id, params.world_pool)
        ctx.skipped_worlds = dict(pool.skipped)
        worlds = pool.usable()
        # the trigger's world, when it is among the loaded ones (io ids are unique per agent)
        latest = next((w for w in worlds if w.io_id == (ctx.io_id or "")), None)
        ctx.latest = latest.id if latest else None
        ctx.provider, ctx.model = _policy(worlds, latest, deps)
        if not worlds:
            return final(ctx, "recorded", "no worlds", t0)
        # the incumbent's version is its stored id (H0's when none); its payload is read and
        # tamper-checked only where it is replayed
        ctx.inc_version = ctx.start_version or H0_VERSION
        _read_implicit(deps, session, ctx, pool)
        session.connection(execution_options=_READ)  # _decide's reads (its one write: its own turn)
        return _decide(deps, session, ctx, state, pool, t0)


def open_row(deps: Deps, lease: Lease, *, force: bool = False, kind: str = KIND_CONSOLIDATE
             ) -> tuple[RoundContext, bool]:
    """Step 1: the run row of ``lease`` (idempotent per fence) and its context; True if running.

    ``force``: treat every scored world as fresh (module docstring); ``kind``: stored on the run row
    (at most :data:`MAX_KIND_CHARS` characters).

    A new row gets its context stored at once, in the same transaction: the lease token is then
    on the row from the start, so a failure at any later point releases the right lease
    (``finalize.settle``; ``docs/operations/failure-recovery.md``). A redelivered task keeps the
    stored context.

    Raises:
        InvalidInput: ``kind`` is empty or too long (nothing is written).
    """
    if not isinstance(kind, str) or not 0 < len(kind) <= MAX_KIND_CHARS:
        raise InvalidInput(f"run kind must be 1..{MAX_KIND_CHARS} characters, got {kind!r}")
    with deps.sessions() as session:
        return _open_row(deps, session, lease, force=force, kind=kind)


def _open_row(
    deps: Deps, session: Session, lease: Lease, *, force: bool, kind: str
) -> tuple[RoundContext, bool]:
    kind = run_kind(lease.io, kind)  # a refine's lease names its request (docs/runtime/refine.md)
    refine: dict[str, Any] = {}
    if is_refine_io(lease.io):  # its stored request, read before the write turn
        session.connection(execution_options=_READ)
        refine = refine_of(session, lease.agent, lease.io)
        session.commit()

    def context(run_id: str, start_version: str | None) -> RoundContext:
        return RoundContext(run_id=run_id, agent_id=lease.agent, fence=lease.fence, token=lease.token,
                            io_id=lease.io, start_version=start_version, early_stop=deps.params.early_stop,
                            force=bool(force), refine=refine)

    new_id = new_run_id()
    opened = open_run_row(session, lease.agent, fence=lease.fence, io_id=lease.io, kind=kind, run_id=new_id,
                          params=lambda version: context(new_id, version).to_json(),
                          retention=deps.settings.run_retention)
    ctx = context(opened.id, opened.start_version)
    running = opened.status == "running"
    if running and not opened.has_params:
        set_run_params(session, opened.id, ctx.to_json())
    session.commit()
    return ctx, running


def _survey(ctx: RoundContext, state: ConsolidationState,
            pool: WorldPool) -> tuple[list[PoolWorld], set[str]]:
    """The usable worlds and the fresh ones (steps 4–5), from the rows' signals alone (no record is
    read here)."""
    worlds = pool.usable()
    ctx.skipped_worlds = dict(pool.skipped)
    ctx.loaded = [w.id for w in worlds]
    ctx.digests = {w.id: signal_digest(w.signals) for w in worlds}
    if ctx.force:  # every world counts as fresh for this run (module docstring)
        fresh = {w.id for w in worlds}
    else:
        fresh = {w.id for w in worlds if ctx.digests[w.id] != state.seen.get(w.id, EMPTY_DIGEST)}
    return worlds, fresh


def _checks(w: PoolWorld) -> list[dict[str, Any]]:
    """A replayable world's checks (step 5); the record is read only when they quote its answer."""
    return checks_for(w.signals, answer=w.answer if needs_answer(w.signals) else "")


def _nothing_to_learn(ctx: RoundContext, worlds: Sequence[PoolWorld], fresh: set[str],
                      t0: float, scored_by: Callable[[PoolWorld], bool] | None = None) -> Next | None:
    """The ``recorded`` result when no fresh world asks for a fix, else None — decided from the
    signals in memory (docs/performance/consolidation.md#the-no-signal-path). A round needs a fresh
    scored world with a negative signal, and :func:`negative` reads signals only; the reason is the
    one the full survey gives, with records read only for the few worlds whose checks quote their
    answer, and only until the first scored one is found. ``scored_by(w)``: whether ``w`` has a
    check, when it must equal ``bool(_checks(w))`` (the quiet path's memo of answers)."""
    if any(w.replayable and w.id in fresh and negative(w.signals) for w in worlds):
        return None
    # fresh worlds first: a fresh scored world also answers "is any world scored?"
    ordered = sorted((w for w in worlds if w.replayable), key=lambda w: w.id not in fresh)
    has_checks = scored_by or (lambda w: bool(_checks(w)))
    scored = next((w for w in ordered if has_checks(w)), None)
    if scored is None:
        return final(ctx, "recorded", "no turn has a signal to learn from yet", t0)
    if scored.id not in fresh:
        return final(ctx, "recorded", "no new correction or problem to fix", t0)
    return final(ctx, "recorded", "new signals only confirm the current answers", t0)


def _decide(
    deps: Deps,
    session: Session,
    ctx: RoundContext,
    state: ConsolidationState,
    pool: WorldPool,
    t0: float,
) -> Next:
    """Steps 4–7."""
    params = deps.params
    worlds, fresh = _survey(ctx, state, pool)
    refine = ctx.refine
    if refine.get("missing"):
        return final(ctx, "recorded", "the refine request is not stored", t0)
    quiet = None if refine else _nothing_to_learn(ctx, worlds, fresh, t0)
    if quiet is not None:
        ctx.skipped_worlds = dict(pool.skipped)
        return quiet
    checks = {w.id: _checks(w) for w in worlds if w.replayable}
    for wid, extra in operator_checks(refine, worlds, params.n_eval).items():  # a refine's criteria
        checks[wid] = [*checks.get(wid, []), *extra]
    worlds = pool.usable()  # records read for the checks that turned out bad drop their world
    ctx.skipped_worlds = dict(pool.skipped)
    ctx.loaded = [w.id for w in worlds]
    ctx.digests = {w.id: ctx.digests[w.id] for w in worlds}
    scored = [w for w in worlds if w.replayable and checks.get(w.id)]
    if not scored:
        return final(ctx, "recorded", "no turn has a signal to learn from yet", t0)
    fresh_scored = [w for w in scored if w.id in fresh]
    if not refine and not any(negative(w.signals) for w in fresh_scored):
        reason = (
            "no new correction or problem to fix"
            if not fresh_scored
            else "new signals only confirm the current answers"
        )
        return final(ctx, "recorded", reason, t0)
    pool.prefetch([w.id for w in scored])  # a round replays them: their records must be readable
    if any(w.id in pool.skipped for w in scored):
        return _decide(deps, session, ctx, state, pool, t0)  # again without them: at most once more
    chosen = select_worlds(scored, fresh, params.n_eval)
    ctx.worlds = [w.id for w in chosen]
    ctx.fresh = sorted(fresh & set(ctx.worlds))
    ctx.checks = {w.id: checks[w.id] for w in chosen}
    used: list[str] = []
    lessons, lesson_checks, ctx.lessons = add_lessons(session, ctx.agent_id, ctx.start_version, ctx.worlds,
                                                      params.regression_worlds, used)
    ctx.worlds += [w.id for w in lessons]
    ctx.checks.update(lesson_checks)
    evaluated: list[Any] = [*chosen, *lessons]
    slots = plan_incumbent(evaluated, ctx.inc_version, ctx.model, state.cache.get(ctx.inc_version, {}),
                           params.k)
    ctx.slots["incumbent"] = [s.to_json() for s in slots]
    ctx.phase = "incumbent"
    encoded = encode_json(ctx.to_json())  # before the write turn
    session.commit()  # end the reads
    touch_regressions(session, used)  # the lessons replayed are marked used, with the context
    set_run_params(session, ctx.run_id, encoded)
    session.commit()
    return Next("trials", ctx, slots=slots)
