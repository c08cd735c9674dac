"""The consolidation run as one state machine: its states, its transitions, the checks around every
step, and its one failure path (docs/architecture.md#the-runs-state-machine).

A run moves through guarded **steps** (``open`` → ``after_incumbent`` → ``judge_round``) and,
between two steps, a **fan-out** of independent members (``trials``: one replay per slot;
``drafts``: one proposal per variant, which launches its own candidate's trials as soon as it
passed — its **follow-on** members, run in the same fan-out before the next step). A step returns
a :class:`Next`; what follows it is looked up in :data:`TRANSITIONS` by ``(Next.kind, phase)`` —
the one table both drivers read (the Celery tasks build one chord per edge, the inline driver maps
the members on a :class:`~rsi_worker.consolidate.inline.TrialExecutor` and calls the next step)::

    open ──trials──► after_incumbent ──drafts (each ─► its trials)──► judge_round ─► final
      │                    │
      └──► final / stop    └──► final / stop

The machine, not the step, applies around every step: the run must still be ``running`` (and, for
``after_incumbent``, in a phase it accepts) — otherwise the step is a redelivery of a closed run and
the outcome is ``stop``; the lease is renewed (:func:`renew_or_stop`; a lost lease raises
:class:`~rsi_common.errors.LeaseLost`); a reached spend cap ends the run ``skipped``
(:func:`spend_stop`). Around every member: the run must be ``running`` and the lease held; a
member never raises (its failure is a structured result, the slot stays empty). Any exception of a
step goes to :func:`fail_run`.

Pure pipeline: no Celery import (``tests/unit/test_import_graph.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rsi_common.coord import Lease
from rsi_common.db import get_run
from rsi_common.errors import CoordinationError, LeaseLost
from rsi_common.stored import error_record
from rsi_worker.consolidate import quiet, quiet_lease
from rsi_worker.consolidate.context import Deps, RoundContext
from rsi_worker.consolidate.drafting import draft_and_launch
from rsi_worker.consolidate.evaluate import TrialSlot
from rsi_worker.consolidate.finalize import Settled, close_lease, finalize, settle, settle_lease
from rsi_worker.consolidate.incumbent import after_incumbent
from rsi_worker.consolidate.inputs import record_inputs
from rsi_worker.consolidate.judging import judge_round
from rsi_worker.consolidate.opening import KIND_CONSOLIDATE, open_row, open_step
from rsi_worker.consolidate.outcome import Next, final
from rsi_worker.consolidate.refining import is_refine_io
from rsi_worker.consolidate.result import ConsolidationResult
from rsi_worker.consolidate.spend import over_cap
from rsi_worker.consolidate.tree_spend import tree_exhausted
from rsi_worker.consolidate.trial_load import load_trial
from rsi_worker.consolidate.trials import run_trial as trial_body

__all__ = [
    "ACCEPTS",
    "FOLLOWS",
    "MEMBERS",
    "STEPS",
    "TRANSITIONS",
    "Edge",
    "Member",
    "Step",
    "close",
    "edge",
    "fail_run",
    "follow_on",
    "items",
    "open_run",
    "renew_or_stop",
    "run_draft",
    "run_member",
    "run_step",
    "run_trial",
    "spend_stop",
    "tree_stop",
]

log = logging.getLogger(__name__)

Step = Literal["open", "after_incumbent", "judge_round"]
"""The guarded steps; each but ``open`` is a chord body on the cluster."""
Member = Literal["trials", "drafts"]
"""The fan-outs: independent members run between two steps (chord headers on the cluster)."""

StepBody = Callable[[Deps, RoundContext], Next]
MemberBody = Callable[..., dict[str, Any]]
"""``(deps, ctx, stored drafts, item)``; the ``trials`` body also takes ``reads=`` (``trial_load``)."""


@dataclass(frozen=True)
class Edge:
    """A transition: run ``members`` (one per item of the outcome; ``None``: no fan-out) and the
    follow-on members each of them returns (:data:`FOLLOWS`), then ``then``."""

    members: Member | None
    then: Step


TRANSITIONS: Mapping[tuple[str, str], Edge] = {
    ("trials", "incumbent"): Edge("trials", "after_incumbent"),
    ("drafts", "drafting"): Edge("drafts", "judge_round"),
}
"""``(Next.kind, RoundContext.phase)`` → what follows. ``final`` and ``stop`` end the run's steps
(``final`` is written by :func:`close`); any other pair is a bug and raises."""

STEPS: dict[Step, StepBody] = {
    "open": open_step,
    "after_incumbent": after_incumbent,
    "judge_round": judge_round,
}
"""Step → its body, called with the run's context after the machine's checks (a dict, so a test
can inject a failure into one step)."""

ACCEPTS: Mapping[Step, tuple[str, ...]] = {"after_incumbent": ("incumbent", "drafting")}
"""The phases a step accepts; a step found in another phase stops (a stale redelivery). Absent:
every phase."""

MEMBERS: dict[Member, MemberBody] = {"trials": trial_body, "drafts": draft_and_launch}
"""Member kind → its body ``(deps, ctx, stored drafts, item)``, called after the machine's checks."""

FOLLOWS: Mapping[Member, Member] = {"drafts": "trials"}
"""Member kind → the kind of the follow-on members its results name (:func:`follow_on`): a passed
draft launches its candidate's trials at once, inside the same fan-out, before the next step."""


def renew_or_stop(deps: Deps, ctx: RoundContext) -> None:
    """Renew the run's lease; a lost lease stops the run at once
    (docs/algorithm/consolidation.md#33-the-run-step-by-step).

    Raises:
        LeaseLost: the lease is held by someone else or expired.
    """
    lease = Lease(ctx.agent_id, ctx.token, ctx.fence, ctx.io_id or "")
    if not deps.coord.renew(lease):
        raise LeaseLost(f"agent {ctx.agent_id}: lease of fence {ctx.fence} is no longer held")


def spend_stop(deps: Deps, ctx: RoundContext, t0: float) -> Next | None:
    """A ``skipped`` result when a spend cap is reached (docs/consolidation/spend.md), else None."""
    spend = over_cap(deps, ctx.agent_id)
    if spend is None:
        return tree_stop(deps, ctx, t0)  # a registered agent's tree caps (docs/runtime/refine.md)
    when = "before the run" if ctx.phase == "open" else "mid-run"
    nxt = final(ctx, "skipped", f"spend cap reached {when}: {spend.reason()}", t0)
    assert nxt.result is not None
    nxt.result.spend = {"capped": True, **spend.to_json()}
    return nxt


def tree_stop(deps: Deps, ctx: RoundContext, t0: float) -> Next | None:
    """A ``skipped`` result ("tree budget exhausted") when the agent's runtime tree is at its cap."""
    with deps.sessions() as session:
        session.connection(execution_options={"sqlite_begin": "DEFERRED"})
        reason = tree_exhausted(session, deps.settings.runtime, ctx.agent_id)
    return None if reason is None else final(ctx, "skipped", reason, t0)


def _guarded(deps: Deps, step: Step, ctx: RoundContext) -> Next:
    """The checks of every step (module docstring), then its body."""
    t0 = time.monotonic()
    renew_or_stop(deps, ctx)
    capped = spend_stop(deps, ctx, t0)
    if capped is not None:
        return capped
    return STEPS[step](deps, ctx)


def open_run(deps: Deps, lease: Lease, *, force: bool = False, kind: str = KIND_CONSOLIDATE) -> Next:
    """The ``open`` step: open the run row of ``lease`` (idempotent per fence), then steps 2–7.

    ``force`` / ``kind``: see :func:`~rsi_worker.consolidate.opening.open_row`.

    Returns ``stop`` (a redelivery of a closed run, or a no-signal run that found a duplicate
    delivery's row at its fence), a final ``Next`` or the incumbent's ``trials``.

    Raises:
        LeaseLost: the lease was not held any more.
        InvalidInput: ``kind`` is empty or too long (nothing is written).
    """
    refining = is_refine_io(lease.io)  # a refine never takes the quiet path (docs/runtime/refine.md)
    decided = None if refining else quiet.decide_and_record(deps, lease, force=force, kind=kind)  # one read
    if decided is not None:
        return decided
    ctx, running = open_row(deps, lease, force=force, kind=kind)
    if not running:
        return Next("stop", ctx)
    nxt = _guarded(deps, "open", ctx)
    if nxt.kind == "trials":  # a round starts: its exact inputs, for replaying the run
        record_inputs(deps, nxt.ctx)
    return nxt


def _load(deps: Deps, run_id: str) -> tuple[RoundContext, str, dict[str, Any]]:
    """The run's stored context, status and drafts (one read transaction, deferred on SQLite: it
    takes no write turn, docs/performance/consolidation.md#a-trials-cost)."""
    with deps.sessions() as session:
        session.connection(execution_options={"sqlite_begin": "DEFERRED"})
        run = get_run(session, run_id)
        ctx = RoundContext.from_json(run.params or {})
        status, drafts = str(run.status), dict(run.drafts or {})
        session.commit()  # end the read transaction (keeps loaded rows usable)
    return ctx, status, drafts


def run_step(deps: Deps, step: Step, run_id: str) -> Next:
    """Run ``step`` (not ``open``: see :func:`open_run`) of ``run_id`` under the machine's checks."""
    ctx, status, _ = _load(deps, run_id)
    if status != "running" or ctx.phase not in ACCEPTS.get(step, (ctx.phase,)):
        return Next("stop", ctx)
    return _guarded(deps, step, ctx)


def edge(nxt: Next) -> Edge | None:
    """What follows ``nxt``: ``None`` when the steps are over (``final``, ``stop``).

    Raises:
        ValueError: an outcome the table does not know (a bug in a step).
    """
    if nxt.kind in ("final", "stop"):
        return None
    found = TRANSITIONS.get((nxt.kind, nxt.ctx.phase))
    if found is None:
        raise ValueError(f"no transition from {nxt.kind!r} in phase {nxt.ctx.phase!r}")
    return found


def items(nxt: Next, members: Member) -> list[Any]:
    """The fan-out's items: the trial slots or the variant labels of ``nxt``."""
    return list(nxt.slots) if members == "trials" else list(nxt.variants)


def follow_on(members: Member, result: Mapping[str, Any]) -> list[Any]:
    """The follow-on items (of kind ``FOLLOWS[members]``) a member's ``result`` asks for: the trial
    slots of a passed draft; ``[]`` for a member kind without follow-ons."""
    if FOLLOWS.get(members) != "trials":
        return []
    return [TrialSlot.from_json(s) for s in result.get("slots") or ()]


def _brief(members: Member, item: Any) -> dict[str, Any]:
    if members == "drafts":
        return {"variant": item}
    return {"candidate": item.candidate, "world_id": item.world_id, "trial": item.trial}


def run_member(deps: Deps, members: Member, run_id: str, item: Any) -> dict[str, Any]:
    """One member of a fan-out under the machine's checks; never raises (a chord member's contract).

    Returns the member's result, or ``{"status": "stale" | "lease_lost" | "error", ...}`` when the run
    is closed, its lease lost, or the member failed (the slot stays empty: a missing trial, a
    dropped variant — the same on the cluster and inline).
    """
    try:
        if members == "trials":  # the run row and the trial's reads in one read (trial_load)
            loaded = load_trial(deps, run_id, item)
            ctx, status, drafts = loaded.ctx, loaded.status, loaded.drafts
        else:
            ctx, status, drafts = _load(deps, run_id)
        if status != "running":
            return {"status": "stale", **_brief(members, item)}
        try:
            if members != "trials":  # a trial renews in its first round trip (trials.run_trial)
                renew_or_stop(deps, ctx)
            else:
                return MEMBERS[members](deps, ctx, drafts, item, reads=loaded.reads)
        except CoordinationError as exc:
            return {"status": "lease_lost", "error": error_record(exc), **_brief(members, item)}
        return MEMBERS[members](deps, ctx, drafts, item)
    except Exception as exc:  # infrastructure trouble: the slot stays empty
        log.warning("run %s: %s member failed: %s", run_id, members, type(exc).__name__, exc_info=True)
        if members == "trials":
            deps.metrics.replay_finished({"status": "error"})
        return {"status": "error", "error": error_record(exc), **_brief(members, item)}


def run_trial(deps: Deps, run_id: str, slot: TrialSlot) -> dict[str, Any]:
    """One trial of ``run_id`` (:func:`run_member` of ``trials``); never raises."""
    return run_member(deps, "trials", run_id, slot)


def run_draft(deps: Deps, run_id: str, variant: str) -> dict[str, Any]:
    """One draft of ``run_id`` (:func:`run_member` of ``drafts``); never raises."""
    return run_member(deps, "drafts", run_id, variant)


def close(deps: Deps, nxt: Next) -> tuple[ConsolidationResult | None, Lease | None]:
    """Write a ``final`` outcome (``finalize``; a quiet run's one write, ``quiet.record``): the result
    as written and the re-run's lease, if any. ``(None, None)``: a quiet run found its fence's row
    written by a duplicate delivery, which owns the run and its lease."""
    assert nxt.kind == "final" and nxt.result is not None
    if nxt.quiet is not None:
        written = quiet.record(deps, nxt)
        if written is None:
            return None, None
        return written, close_lease(deps, nxt.ctx, written, [], run_keys=False, finish=quiet_lease.finish)
    return finalize(deps, nxt.ctx, nxt.result)


def fail_run(
    deps: Deps, exc: BaseException, *, run_id: str | None = None, lease: Lease | None = None
) -> Settled:
    """The one failure path of a run: a step (or its dispatch) raised ``exc``.

    The run is closed (``failed``, or ``interrupted`` when the lease was lost) and its lease released
    or handed to one re-run (``finalize.settle``; docs/operations/failure-recovery.md). Without
    ``run_id`` (the ``open`` step: the caller holds ``lease``), the run of the lease's fence is found
    in the database (``db.run_id_at_fence``); when it never opened its row, the lease is released or
    handed on at once and ``Settled.opened`` is False — the caller decides whether to re-raise.

    Raises:
        ValueError: neither ``run_id`` nor ``lease`` was given.
    """
    who = run_id or (f"of {lease.agent} (fence {lease.fence})" if lease is not None else "?")
    if isinstance(exc, CoordinationError):
        log.warning("run %s stopped: %s", who, type(exc).__name__)
    else:
        log.warning("run %s failed: %s", who, type(exc).__name__, exc_info=exc)
    if run_id is not None:
        result, rerun = settle(deps, run_id, exc, lease)
        return Settled(result, rerun, True)
    if lease is None:
        raise ValueError("fail_run needs the run id or the lease")
    return settle_lease(deps, lease, exc)
