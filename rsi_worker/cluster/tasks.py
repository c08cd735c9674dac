"""Thin Celery tasks: load, call a pipeline step (:mod:`rsi_worker.consolidate`), enqueue the next.

The run's shape on the cluster (ARCHITECTURE §1)::

    consolidate ─► chord(replay_trial × incumbent slots) ─► after_incumbent
                ─► chord(draft_candidate × m) ─► judge_round ─► (re-run)
                         └─ a passed draft: Task.replace(group(replay_trial × its worlds × k))

Rules: chords are built explicitly in :func:`_dispatch`; the one rewrite is a passed
``draft_candidate`` replacing itself with the group of its candidate's trials (Celery makes it a
chord member of the same header, so ``judge_round`` still runs once, after every trial of every
candidate: docs/architecture.md#one-consolidation-on-the-cluster); no task waits on another
task's result; chord members (``replay_trial``, ``draft_candidate``) never raise — failures come
back as structured results, and the replacement's ``Ignore`` is the only one raised; every task
renews the agent's lease through its step and stops when it is lost.
Every task may run more than once (at-least-once delivery); each docstring names what makes a
second execution harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Celery, chord, group

from rsi_common.coord import Lease
from rsi_common.dispatch import QUEUE_CONSOLIDATE, QUEUE_JUDGE, QUEUE_REPLAY, TASK_CONSOLIDATE
from rsi_common.stored import error_record
from rsi_worker.cluster.recovery import hand_on
from rsi_worker.cluster.sweeper import sweep
from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.consolidate import (
    Deps,
    Next,
    after_incumbent,
    draft_and_launch,
    judge_round,
    open_run,
    run_trial,
)
from rsi_worker.consolidate.evaluate import TrialSlot
from rsi_worker.consolidate.finalize import finalize, settle, settle_lease

__all__ = ["CeleryDispatcher", "register"]

log = logging.getLogger(__name__)


class CeleryDispatcher:
    """The :class:`~rsi_common.dispatch.Dispatcher` of code that runs inside a worker."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def enqueue(self, task: str, args: list[Any], queue: str) -> str:
        return str(self.app.send_task(task, args=args, queue=queue).id)


def _rerun(app: Celery, deps: Deps, lease: Lease | None) -> None:
    """Enqueue the re-run a closing run handed a pending turn to (never dropped: ``hand_on``)."""
    if lease is not None:
        hand_on(deps.sessions, deps.coord, CeleryDispatcher(app), lease)


def _dispatch(app: Celery, deps: Deps, nxt: Next) -> str:
    """Enqueue what ``nxt`` asks for; a final result is written here. Returns what was done."""
    run_id = nxt.ctx.run_id
    if nxt.kind == "final":
        assert nxt.result is not None
        result, rerun = finalize(deps, nxt.ctx, nxt.result)
        _rerun(app, deps, rerun)
        return result.status
    if nxt.kind == "trials":
        body = "rsi.after_incumbent" if nxt.ctx.phase == "incumbent" else "rsi.judge_round"
        queue = QUEUE_JUDGE
        header = [
            app.signature("rsi.replay_trial", args=(run_id, s.to_json()), queue=QUEUE_REPLAY)
            for s in nxt.slots
        ]
        chord(header)(app.signature(body, args=(run_id,), queue=queue))
        return f"{len(header)} trials"
    if nxt.kind == "drafts":
        header = [
            app.signature("rsi.draft_candidate", args=(run_id, v), queue=QUEUE_CONSOLIDATE)
            for v in nxt.variants
        ]
        chord(header)(app.signature("rsi.judge_round", args=(run_id,), queue=QUEUE_JUDGE))
        return f"{len(header)} drafts"
    if nxt.kind == "judge":
        app.send_task("rsi.judge_round", args=[[], run_id], queue=QUEUE_JUDGE)
        return "judge"
    return "stop"


def _step(app: Celery, ctx: WorkerContext, task_id: str, run_id: str, step: Callable[[Deps], Next]) -> str:
    """Run one step of ``run_id`` and dispatch its outcome; an exception in either settles the run
    (``failed``, or ``interrupted`` when the lease was lost) and releases or hands on its lease
    (``docs/operations/failure-recovery.md``)."""
    deps = ctx.runtime().deps
    if ctx.count_delivery(task_id) > ctx.settings.max_redeliveries + 1:
        _, rerun = settle(deps, run_id, RuntimeError("task redelivered too often"))
        _rerun(app, deps, rerun)
        return "redelivery cap"
    try:
        return _dispatch(app, deps, step(deps))
    except Exception as exc:
        log.warning("run %s: step failed: %s", run_id, type(exc).__name__, exc_info=True)
        _, rerun = settle(deps, run_id, exc)
        _rerun(app, deps, rerun)
        return f"settled after {type(exc).__name__}"


def register(app: Celery, ctx: WorkerContext) -> None:
    """Register rsi-worker's tasks on ``app`` (task names are part of the wire contract)."""

    @app.task(name=TASK_CONSOLIDATE, bind=True)
    def consolidate(self: Any, agent: str, io: str, token: str, fence: int, force: bool = False,
                    kind: str = "consolidate") -> str:
        """Open the run of a lease (SPEC §3.3 steps 1–7); ``force``/``kind`` (keyword arguments with
        defaults, so positional host messages keep working): see ``open_run`` (``rsi batch``).

        Idempotency key: ``(agent, fence)`` — ``start_run`` returns the stored row, and a closed
        run stops at once; a lease no longer held stops before anything is written. Any exception
        closes the run (or, before its row exists, just the lease) with this task's lease, which is
        released or handed to one re-run (``finalize.settle_lease``), as the inline driver does.
        """
        deps = ctx.runtime().deps
        lease = Lease(agent, token, int(fence), io)
        try:
            return _dispatch(app, deps, open_run(deps, lease, force=bool(force), kind=str(kind)))
        except Exception as exc:
            log.warning("consolidate %s: %s", agent, type(exc).__name__, exc_info=True)
            settled = settle_lease(deps, lease, exc)
            _rerun(app, deps, settled.rerun)
            return f"{'settled' if settled.opened else 'not opened'} after {type(exc).__name__}"

    @app.task(name="rsi.replay_trial", bind=True)
    def replay_trial(self: Any, run_id: str, slot: dict[str, Any]) -> dict[str, Any]:
        """One trial (chord member; never raises).

        Idempotency key: ``(run_id, candidate, world_id, trial)`` — a stored row is returned; the
        early-stop report is slot-idempotent in Redis.
        """
        try:
            if ctx.count_delivery(self.request.id) > ctx.settings.max_redeliveries + 1:
                return {"status": "redelivery_cap", **_slot_brief(slot)}
            return run_trial(ctx.runtime().deps, run_id, TrialSlot.from_json(slot))
        except Exception as exc:  # infrastructure trouble: the slot stays empty (a missing trial)
            log.warning("run %s: trial failed: %s", run_id, type(exc).__name__, exc_info=True)
            ctx.metrics.replay_finished({"status": "error"})
            return {"status": "error", "error": error_record(exc), **_slot_brief(slot)}

    @app.task(name="rsi.after_incumbent", bind=True)
    def after_incumbent_task(self: Any, _results: Any, run_id: str) -> str:
        """Steps 8–11 (chord body). Idempotent: recomputed from stored rows; drafts are stored per label."""
        return _step(app, ctx, self.request.id, run_id, lambda d: after_incumbent(d, run_id))

    @app.task(name="rsi.draft_candidate", bind=True)
    def draft_candidate(self: Any, run_id: str, variant: str) -> Any:
        """Draft one variant and, when it passed the precheck and critic, launch its trials at once
        (chord member; never raises): the task replaces itself with the group of its candidate's
        ``replay_trial`` tasks, which stays a member of the draft chord, so ``judge_round`` waits for
        them. Idempotency key: ``(run_id, variant)`` — a redelivery finds the draft and the bound
        hash stored; its trials are keyed slots."""
        try:
            draft, slots = draft_and_launch(ctx.runtime().deps, run_id, variant)
        except Exception as exc:
            return {"variant": variant, "status": "error", "error": error_record(exc)}
        if not slots:
            return {"variant": variant, "gate": draft.get("gate")}
        trials = group(app.signature("rsi.replay_trial", args=(run_id, s.to_json()), queue=QUEUE_REPLAY)
                       for s in slots)
        return self.replace(trials)

    @app.task(name="rsi.judge_round", bind=True)
    def judge_round_task(self: Any, _results: Any, run_id: str) -> str:
        """Steps 14–18 (chord body). Idempotent: the fenced final write applies once; a second
        delivery finds the run closed and stops."""
        return _step(app, ctx, self.request.id, run_id, lambda d: judge_round(d, run_id))

    @app.task(name="rsi.sweep")
    def sweep_task() -> dict[str, Any]:
        """The sweeper (Celery beat). Idempotent: every action is conditional on current state."""
        rt = ctx.runtime()
        report = sweep(rt.sessions, rt.coord, CeleryDispatcher(app), ctx.settings)
        ctx.metrics.sweep_done(report.to_json())
        return report.to_json()


def _slot_brief(slot: dict[str, Any]) -> dict[str, Any]:
    return {k: slot.get(k) for k in ("candidate", "world_id", "trial")}
