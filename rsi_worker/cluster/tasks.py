"""Thin Celery tasks: each drives one state of the run's state machine
(:mod:`rsi_worker.consolidate.flow`) and enqueues what its transition table says follows.

The run's shape on the cluster (docs/architecture.md#the-runs-state-machine)::

    consolidate ─► chord(replay_trial × incumbent slots) ─► after_incumbent
                ─► chord(draft_candidate × m) ─► judge_round ─► (re-run)
                         └─ a passed draft: Task.replace(group(replay_trial × its first wave,
                                                               release_wave))
                              └─ the releasing first-wave trial (or the gate): add_to_chord(
                                   replay_trial × its second wave)

Rules: chords are built explicitly in :func:`_dispatch`, one per edge of ``flow.TRANSITIONS``; the
one rewrite is a passed ``draft_candidate`` replacing itself with the group of its candidate's
trials (``flow.FOLLOWS``; Celery keeps the replacement a member of the same chord, so
``judge_round`` runs once, after every trial of every candidate); no task waits on another task's
result; chord members (``replay_trial``, ``draft_candidate``) never raise — failures come back as
structured results, and the replacement's ``Ignore`` is the only one raised. Every task is
registered through the one wrapper (:mod:`rsi_worker.cluster.middleware`: log context, delivery
count and cap, settle); its :class:`~rsi_worker.cluster.middleware.Policy` says what it answers
when capped or failed. Every
task may run more than once (at-least-once delivery); each docstring names what makes a second
execution harmless.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from celery import Celery, chord, group

from rsi_common.coord import Lease
from rsi_common.dispatch import (
    TASK_AFTER_INCUMBENT,
    TASK_CONSOLIDATE,
    TASK_DRAFT_CANDIDATE,
    TASK_JUDGE_ROUND,
    TASK_QUEUES,
    TASK_RELEASE_WAVE,
    TASK_REPLAY_TRIAL,
    TASK_SWEEP,
)
from rsi_common.stored import error_record
from rsi_worker.cluster.agent_tasks import register_agent_tasks
from rsi_worker.cluster.evolve_tasks import register_evolve
from rsi_worker.cluster.heartbeat import Heartbeat
from rsi_worker.cluster.join import claim_dispatch, claim_step, claim_ttl_s, release_step
from rsi_worker.cluster.middleware import (
    REDELIVERED_TOO_OFTEN,
    Middleware,
    Policy,
    Replace,
    Resend,
    TaskCall,
    default_chain,
    task,
)
from rsi_worker.cluster.recovery import hand_on
from rsi_worker.cluster.sweeper import sweep
from rsi_worker.cluster.wave_release import GATE_POLL_S, gate_due, send_second_wave
from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.consolidate import Deps, Next, flow
from rsi_worker.consolidate.evaluate import TrialSlot
from rsi_worker.consolidate.flow import Member, Step
from rsi_worker.consolidate.join import ready_step
from rsi_worker.consolidate.waves import release_due, released, releases

__all__ = ["MEMBER_TASKS", "STEP_TASKS", "CeleryDispatcher", "join_in_band", "register", "send"]

log = logging.getLogger(__name__)

STEP_TASKS: Mapping[Step, str] = {
    "open": TASK_CONSOLIDATE,
    "after_incumbent": TASK_AFTER_INCUMBENT,
    "judge_round": TASK_JUDGE_ROUND,
}
"""The task of each step of ``flow.STEPS`` (the chord bodies, and ``consolidate`` for ``open``)."""
MEMBER_TASKS: Mapping[Member, str] = {"trials": TASK_REPLAY_TRIAL, "drafts": TASK_DRAFT_CANDIDATE}
"""The task of each fan-out of ``flow.MEMBERS`` (the chord members)."""
_NOT_STORED = ("stale", "lease_lost", "error", "redelivery_cap")
"""Member statuses that stored nothing: no in-band join after them."""
_WIRE: Mapping[Member, Callable[[Any], Any]] = {"trials": lambda slot: slot.to_json(), "drafts": str}
"""A member's item as a JSON task argument."""


def send(app: Celery, task: str, args: list[Any], queue: str) -> Any:
    """``app.send_task`` of ``task``; for a task that stores no result (``ignore_result``) the sender
    does not subscribe to its result either (one ``SUBSCRIBE`` per message saved)."""
    registered = getattr(app, "tasks", {}).get(task)  # an app-like sender without a registry: as sent
    quiet = registered is not None and bool(registered.ignore_result)
    return app.send_task(task, args=args, queue=queue, **({"ignore_result": True} if quiet else {}))


class CeleryDispatcher:
    """The :class:`~rsi_common.dispatch.Dispatcher` of code that runs inside a worker."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def enqueue(self, task: str, args: list[Any], queue: str) -> str:
        return str(send(self.app, task, args, queue).id)


def _rerun(app: Celery, deps: Deps, lease: Lease | None) -> None:
    """Enqueue the re-run a closing run handed a pending turn to (never dropped: ``hand_on``)."""
    if lease is not None:
        hand_on(deps.sessions, deps.coord, CeleryDispatcher(app), lease)


def _dispatch(app: Celery, deps: Deps, nxt: Next) -> str:
    """Enqueue what follows ``nxt`` in ``flow.TRANSITIONS`` (a final result is written here).
    Returns what was done."""
    if nxt.kind == "final":
        result, rerun = flow.close(deps, nxt)
        _rerun(app, deps, rerun)
        return result.status if result is not None else "stop"
    edge = flow.edge(nxt)
    if edge is None:
        return "stop"
    run_id, body = nxt.ctx.run_id, STEP_TASKS[edge.then]
    if edge.members is None:
        send(app, body, [[], run_id], TASK_QUEUES[body])
        return edge.then
    member, wire = MEMBER_TASKS[edge.members], _WIRE[edge.members]
    header = [app.signature(member, args=(run_id, wire(item)), queue=TASK_QUEUES[member])
              for item in flow.items(nxt, edge.members)]
    chord(header)(app.signature(body, args=(run_id,), queue=TASK_QUEUES[body]))
    return f"{len(header)} {edge.members}"


def join_in_band(app: Celery, deps: Deps, run_id: str) -> str | None:
    """After a member stored its result: dispatch the next step when the stored rows complete the
    fan-out (``consolidate.join.ready_step``) and nobody dispatched it in band yet. Never raises
    (the chord still fires); returns the step dispatched, if any."""
    try:
        step = ready_step(deps, run_id)
        if step is None or not claim_dispatch(deps.coord.client, run_id, step, claim_ttl_s(deps.settings)):
            return None
        body = STEP_TASKS[step]
        send(app, body, [None, run_id], TASK_QUEUES[body])
        return step
    except Exception as exc:  # the chord, or the lease expiry and the sweeper, cover the run
        log.warning("run %s: in-band join skipped: %s", run_id, type(exc).__name__)
        return None


def _claimed_step(app: Celery, deps: Deps, step: Step, run_id: str) -> str:
    """Run ``step`` under its execution claim (``cluster.join``): another task holding the claim
    makes this one stop at once. A step that found nothing to do (the run closed, or its phase moved
    on) gives its claim back, so a late chord body leaves no key behind the run's cleanup."""
    current = app.current_task
    task_id = str(getattr(getattr(current, "request", None), "id", None) or "")
    if not claim_step(deps.coord.client, run_id, step, task_id, claim_ttl_s(deps.settings)):
        return "stop: claimed by another task"
    nxt = flow.run_step(deps, step, run_id)
    if nxt.kind == "stop":
        release_step(deps.coord.client, run_id, step, task_id)
    return _dispatch(app, deps, nxt)


def _task_id(app: Celery) -> str:
    current = app.current_task
    return str(getattr(getattr(current, "request", None), "id", None) or "")


def _send_wave(app: Celery, deps: Deps, run_id: str, candidate: str, wave: int) -> bool:
    """Send ``candidate``'s second wave under the release claim, added to the current task's chord
    (``rsi_worker/cluster/wave_release.py``); True when this task sent it."""
    current, trial = app.current_task, MEMBER_TASKS["trials"]

    def send(slots: Any) -> None:
        for s in slots:  # each add raises the chord's size before the trial is sent
            current.add_to_chord(app.signature(trial, args=(run_id, s, 0), queue=TASK_QUEUES[trial]))

    return send_second_wave(deps, run_id, candidate, wave, _task_id(app), send)


def _release_after(app: Celery, deps: Deps, run_id: str, slot: Any, wave: Any, out: Any) -> None:
    """After a first-wave trial (``wave`` > 0) returned ``out``: send the second wave when it is due
    (``waves.release_due``). Never raises: the gate, or this task's redelivery, sends it otherwise."""
    if not isinstance(wave, int) or isinstance(wave, bool) or wave <= 0 or not isinstance(slot, dict):
        return
    if isinstance(out, dict) and out.get("status") in ("stale", "lease_lost"):
        return  # the run is over (or no longer ours): nothing to release
    try:
        candidate = str(slot["candidate"])
        if not (isinstance(out, dict) and releases(out)):
            bounds, counted = deps.coord.bound_progress(run_id, candidate)
            if not release_due(None, bounds, counted, wave, deps.coord.is_cancelled(run_id, candidate)):
                return
        _send_wave(app, deps, run_id, candidate, wave)
    except Exception as exc:
        log.warning("run %s: second wave not sent by a trial: %s", run_id, type(exc).__name__)


def _slot_brief(slot: Any) -> dict[str, Any]:
    return {k: slot.get(k) for k in ("candidate", "world_id", "trial")} if isinstance(slot, dict) else {}


def _launch(app: Celery, deps: Deps, run_id: str, slots: list[Any], wave: Any) -> list[Any]:
    """A passed draft's replacement: its first ``wave`` trials (each told ``wave``) and the gate
    (``release_wave``, first look in ``GATE_POLL_S``), or every trial (``wave`` absent or whole)."""
    trial = MEMBER_TASKS["trials"]
    n = wave if isinstance(wave, int) and not isinstance(wave, bool) and 0 < wave < len(slots) else None
    if n is None:
        return [app.signature(trial, args=(run_id, s.to_json()), queue=TASK_QUEUES[trial]) for s in slots]
    deadline = time.time() + deps.params.early_stop_wave_s
    gate = app.signature(TASK_RELEASE_WAVE, args=(run_id, slots[0].candidate, n, deadline),
                         queue=TASK_QUEUES[TASK_RELEASE_WAVE], countdown=GATE_POLL_S)
    return [*(app.signature(trial, args=(run_id, s.to_json(), n), queue=TASK_QUEUES[trial])
              for s in slots[:n]), gate]


def register(app: Celery, ctx: WorkerContext, chain: list[Middleware] | None = None) -> None:
    """Register rsi-worker's tasks on ``app``, each wrapped in ``chain`` (default:
    :func:`~rsi_worker.cluster.middleware.default_chain` and the run heartbeat,
    :mod:`rsi_worker.cluster.heartbeat`); task names are part of the wire contract
    (``rsi_common.dispatch``)."""
    chain = [*default_chain(ctx), Heartbeat(ctx)] if chain is None else chain

    def settle(call: TaskCall, exc: BaseException, *, lease: Lease | None = None) -> str:
        """A run step's answer after ``exc`` (or the cap): close the run through ``flow.fail_run``."""
        deps = ctx.runtime().deps
        settled = flow.fail_run(deps, exc, run_id=None if lease is not None else call.run_id, lease=lease)
        _rerun(app, deps, settled.rerun)
        return f"{'settled' if settled.opened else 'not opened'} after {type(exc).__name__}"

    def lease_of(call: TaskCall) -> Lease:
        a = call.arguments
        return Lease(str(a["agent"]), str(a["token"]), int(a["fence"]), str(a["io"]))

    def step_capped(call: TaskCall) -> str:
        settle(call, RuntimeError(REDELIVERED_TOO_OFTEN))
        return "redelivery cap"

    def open_capped(call: TaskCall) -> str:
        settle(call, RuntimeError(REDELIVERED_TOO_OFTEN), lease=lease_of(call))
        return "redelivery cap"

    run_step = Policy(capped=step_capped, failed=lambda call, exc: settle(call, exc))
    opening = Policy(capped=open_capped, failed=lambda call, exc: settle(call, exc, lease=lease_of(call)))

    @task(app, chain, TASK_CONSOLIDATE, opening)
    def consolidate(agent: str, io: str, token: str, fence: int, force: bool = False,
                    kind: str = "consolidate") -> str:
        """The ``open`` step of the run of a lease (steps 1–7, docs/algorithm/consolidation.md);
        ``force``/``kind`` (keyword arguments with defaults, so positional host messages keep
        working): see ``flow.open_run`` (``rsi batch``).

        Idempotency key: ``(agent, fence)`` — ``start_run`` returns the stored row, and a closed
        run stops at once; a lease no longer held stops before anything is written. Any exception
        closes the run (or, before its row exists, just the lease) with this task's lease, which is
        released or handed to one re-run (``flow.fail_run``), as the inline driver does.
        """
        deps = ctx.runtime().deps
        lease = Lease(agent, token, int(fence), io)
        return _dispatch(app, deps, flow.open_run(deps, lease, force=bool(force), kind=str(kind)))

    def trial_capped(call: TaskCall) -> dict[str, Any]:
        """A trial past the redelivery cap stores nothing; a first-wave one still sends the second wave
        when it is due (a claim it took on an earlier delivery must not strand the wave). Never raises."""
        out = {"status": "redelivery_cap", **_slot_brief(call.arguments.get("slot"))}
        a = call.arguments
        if a.get("wave"):
            try:
                deps = ctx.runtime().deps
                _release_after(app, deps, str(a.get("run_id")), a.get("slot"), a.get("wave"), out)
            except Exception as exc:  # the runtime itself failed: the gate sends the wave at its bound
                log.warning("run %s: second wave not sent by a capped trial: %s", a.get("run_id"),
                            type(exc).__name__)
        return out

    @task(app, chain, TASK_REPLAY_TRIAL, Policy(
        capped=trial_capped,
        failed=lambda call, exc: {"status": "error", "error": error_record(exc),
                                  **_slot_brief(call.arguments.get("slot"))},
    ))
    def replay_trial(run_id: str, slot: dict[str, Any], wave: int | None = None) -> dict[str, Any]:
        """One trial (chord member; never raises). ``wave``: ``None`` for a trial launched whole
        (it may wait in ``waves.await_first_wave``); ``n`` > 0 for a first-wave trial of a first wave
        of ``n`` slots, which sends the second wave when its result releases it; ``0`` for a trial
        of a released second wave (it does not wait).

        Idempotency key: ``(run_id, candidate, world_id, trial)`` — a stored row is returned; the
        early-stop report is slot-idempotent in Redis; the second wave is sent once (its claim,
        ``rsi_worker/cluster/wave_release.py``).
        """
        deps = ctx.runtime().deps
        with released(wave == 0):
            out = flow.run_trial(deps, run_id, TrialSlot.from_json(slot))
        _release_after(app, deps, run_id, slot, wave, out)
        if out.get("status") not in _NOT_STORED:
            join_in_band(app, deps, run_id)
        return out

    def gate_capped(call: TaskCall) -> dict[str, Any]:
        """A gate past the redelivery cap sends the wave now (as at its bound): it looks no more, and a
        wave it claimed before must not be stranded. Never raises."""
        a = call.arguments
        try:
            _send_wave(app, ctx.runtime().deps, str(a["run_id"]), str(a["candidate"]), int(a["wave"]))
        except Exception as exc:
            log.warning("run %s: second wave not sent by a capped gate: %s", a.get("run_id"),
                        type(exc).__name__)
        return {"status": "redelivery_cap", "candidate": a.get("candidate")}

    @task(app, chain, TASK_RELEASE_WAVE, Policy(
        capped=gate_capped,
        failed=lambda call, exc: {"status": "error", "error": error_record(exc),
                                  "candidate": call.arguments.get("candidate")},
    ))
    def release_wave(run_id: str, candidate: str, wave: int, deadline: float) -> Any:
        """A candidate's wave gate (chord member; never raises): sends the second wave when it is
        released or at ``deadline`` (epoch seconds: the launch plus ``early_stop_wave_s``), else looks
        again in ``GATE_POLL_S`` as a new message (``Resend``: no thread held meanwhile).
        Idempotency key: ``(run_id, candidate)`` — the release claim; the same task id re-enters it."""
        deps = ctx.runtime().deps
        due = gate_due(deps, run_id, candidate, int(wave), float(deadline))
        if due is None:
            return {"status": "sent", "candidate": candidate}
        if due:
            sent = _send_wave(app, deps, run_id, candidate, int(wave))
            return {"status": "released" if sent else "sent", "candidate": candidate}
        return Resend(app.signature(TASK_RELEASE_WAVE, args=(run_id, candidate, int(wave), float(deadline)),
                                    queue=TASK_QUEUES[TASK_RELEASE_WAVE]), GATE_POLL_S)

    @task(app, chain, TASK_AFTER_INCUMBENT, run_step)
    def after_incumbent(_results: Any, run_id: str) -> str:
        """Steps 8–11 (chord body, or the in-band join). Idempotent: recomputed from stored rows;
        drafts are stored per label; a second task of the step stops (execution claim)."""
        deps = ctx.runtime().deps
        return _claimed_step(app, deps, "after_incumbent", run_id)

    @task(app, chain, TASK_DRAFT_CANDIDATE, Policy(
        capped=lambda call: {"variant": call.arguments.get("variant"), "status": "redelivery_cap"},
        failed=lambda call, exc: {"variant": call.arguments.get("variant"), "status": "error",
                                  "error": error_record(exc)},
    ))
    def draft_candidate(run_id: str, variant: str) -> Any:
        """Draft one variant and, when it passed the precheck and critic, launch its trials at once
        (chord member; never raises): the task replaces itself with the group of its candidate's
        first-wave ``replay_trial`` tasks and its wave gate (all of them when there is one wave), which
        stays a member of the draft chord, so ``judge_round`` waits for them and for the second wave
        they add to it. Idempotency key: ``(run_id, variant)`` — a redelivery finds the draft and its slots
        stored; its trials are keyed slots."""
        deps = ctx.runtime().deps
        out = flow.run_draft(deps, run_id, variant)
        slots = flow.follow_on("drafts", out)
        if slots:
            return Replace(group(_launch(app, deps, run_id, slots, out.get("wave"))))
        if out.get("status") not in _NOT_STORED:
            join_in_band(app, deps, run_id)
        return {"variant": variant, "gate": out.get("gate"),
                **({"status": out["status"]} if "status" in out else {})}

    @task(app, chain, TASK_JUDGE_ROUND, run_step)
    def judge_round(_results: Any, run_id: str) -> str:
        """Steps 14–18 (chord body, or the in-band join). Idempotent: the fenced final write applies
        once; a second delivery finds the run closed and stops; a second task of the step stops at
        once (execution claim)."""
        deps = ctx.runtime().deps
        return _claimed_step(app, deps, "judge_round", run_id)

    register_evolve(app, ctx, chain)
    register_agent_tasks(app, ctx, chain)

    @task(app, chain, TASK_SWEEP, Policy(capped=lambda call: {"skipped": "redelivery cap"}))
    def sweep_task() -> dict[str, Any]:
        """The sweeper (Celery beat). Idempotent: every action is conditional on current state; a
        failure propagates (the next beat sweeps again)."""
        rt = ctx.runtime()
        report = sweep(rt.sessions, rt.coord, CeleryDispatcher(app), ctx.settings)
        ctx.metrics.sweep_done(report.to_json())
        return report.to_json()
