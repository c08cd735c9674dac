"""The evolve run on the cluster (docs/algorithm/evolve.md#on-the-cluster): a chain of ``evolve_step``
tasks, each fanning out its pending trials as ``evolve_trial`` tasks on the ``replay`` queue, joined
in band: the trial that finds its batch complete in SQL sends the next ``evolve_step``
(:mod:`rsi_worker.evolve.join`).

    evolve_step ─► evolve_trial × lanes ─(joined in SQL)─► evolve_step (judged, then the next round)
                ─► evolve_trial × lanes ─► … ─► done | stopped | failed

A step sends each evaluation's trials as soon as its engine defers them (a candidate's once its smoke
passed, beside the other candidate's drafting): it pushes them onto the batch's shared queue and
publishes lanes that drain it (:mod:`rsi_worker.cluster.evolve_queue`), and seals the batch when its
engine work is done (:mod:`rsi_worker.cluster.evolve_batch`); a batch already complete at its seal is
judged in the same step. A step whose baseline or round is finished goes on into the next round in the
same task. No task waits on another. ``evolve_trial`` never raises (its policy answers an error); its
idempotency key is the trial row's ``(evolve, t, candidate, task, trial, attempt)``. ``evolve_step``
recomputes everything from stored rows (drafts, analyses and trials are stored as they are made), so a
redelivered step decides the same and a killed worker's trials are simply run again by the next step.
A step sent by a join first claims its batch in Redis (``SET NX`` of :func:`join_key` with its task id):
a second step sent for the same batch (two trials saw it complete, or a redelivered trial) stops; a
redelivery of the claiming step (same task id) goes on.

Every task carries the chain's lease (``agent``, ``token``, ``fence``, ``io``;
:mod:`rsi_worker.cluster.evolve_watch`): it renews it when it starts (the heartbeat renews it while a
long one runs) and stops at once when the renewal fails — the sweeper replaced a chain that stopped
beating, and the new chain does the work. The step that ends the run releases the lease.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from typing import Any

from celery import Celery, current_task

from rsi_common.coord import Lease
from rsi_common.dispatch import TASK_EVOLVE_STEP, TASK_EVOLVE_TRIAL, TASK_QUEUES
from rsi_common.stored import error_record
from rsi_worker.cluster.evolve_batch import Fanout, failed, mark_failed, sealed_batch
from rsi_worker.cluster.evolve_queue import lane_specs, push
from rsi_worker.cluster.evolve_queue import release as release_taken
from rsi_worker.cluster.evolve_watch import holder, lease_args, release, renewed
from rsi_worker.cluster.middleware import Middleware, Policy, TaskCall, task
from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.evolve.engine import EvolveEnv, RunOutcome, run_step, run_trial_spec
from rsi_worker.evolve.join import joined
from rsi_worker.evolve.memo import MEMO
from rsi_worker.evolve.timeline import Timeline

__all__ = ["JOIN_TTL_S", "claim_join", "join_key", "register_evolve", "step_signature"]

log = logging.getLogger(__name__)

JOIN_TTL_S = 86_400
"""How long a batch's claim is kept (far beyond any round; a late trial's step then still stops)."""


def join_key(name: str, batch_id: str) -> str:
    """The Redis key the step of a joined batch claims (``SET NX`` with its task id)."""
    return f"rsi:{holder(name)}:join:{batch_id}"


def claim_join(client: Any, name: str, batch_id: str, task_id: str) -> bool:
    """Claim batch ``batch_id`` of run ``name`` for the step ``task_id``: true for the first step sent for
    the batch and for a redelivery of it (the same task id), false for any other."""
    key = join_key(name, batch_id)
    if client.set(key, task_id, nx=True, ex=JOIN_TTL_S):
        return True
    claimed = client.get(key)
    return (claimed.decode() if isinstance(claimed, bytes) else claimed) == task_id


def step_signature(app: Celery, name: str, lease: Lease | None = None, join: str | None = None) -> Any:
    """The ``evolve_step`` of run ``name`` carrying ``lease`` and, sent by a join, its batch id."""
    queue = TASK_QUEUES[TASK_EVOLVE_STEP]
    return app.signature(TASK_EVOLVE_STEP, args=([], name, *lease_args(lease), join), queue=queue)


def _batched(producer: Any) -> contextlib.AbstractContextManager[Any]:
    """The producer's publish batch (kombu ≥ 5.7: one pipelined round trip on Redis; a transport without
    batches publishes at once), or nothing on an older kombu."""
    batch = getattr(producer, "batch", None)
    return batch() if callable(batch) else contextlib.nullcontext()


def _str(value: Any) -> str | None:
    return str(value) if value else None


def _lease(agent: str | None, token: str | None, fence: int | None, io: str | None) -> Lease | None:
    if agent is None or token is None or fence is None:
        return None
    return Lease(str(agent), str(token), int(fence), str(io or ""))


def register_evolve(app: Celery, ctx: WorkerContext, chain: list[Middleware]) -> None:
    """Register ``evolve_step`` and ``evolve_trial`` on ``app`` through the task wrapper ``chain``."""

    timeline = Timeline(ctx.settings.home)

    def env() -> EvolveEnv:
        rt = ctx.runtime()
        return EvolveEnv(rt.sessions, rt.deps.models, ctx.settings)

    def step_failed(call: TaskCall, exc: BaseException) -> str:
        a = call.arguments
        name = str(a.get("name"))
        try:
            env().store.set_run(name, status="failed")
            release(ctx.runtime().coord, _lease(a.get("agent"), a.get("token"), a.get("fence"), a.get("io")))
        except Exception:  # the run row may be gone; nothing else to settle
            return f"failed: {type(exc).__name__}"
        return f"failed: {type(exc).__name__}"

    @task(
        app,
        chain,
        TASK_EVOLVE_STEP,
        Policy(
            capped=lambda call: step_failed(call, RuntimeError("redelivered too often")),
            failed=step_failed,
        ),
    )
    def evolve_step(
        _results: Any,
        name: str,
        agent: str | None = None,
        token: str | None = None,
        fence: int | None = None,
        io: str | None = None,
        join: str | None = None,
    ) -> str:
        """One step of the run, and the next ones while they need no trial from the cluster: a finished
        baseline or round goes on into the next round in this task (no message, hop or reload between
        them). Idempotent: recomputed from stored rows. A step whose lease is no longer held (a newer
        chain runs) stops before anything; so does a second step sent for one batch."""
        start = time.time()
        coord = ctx.runtime().coord
        lease = _lease(agent, token, fence, io)
        task_id = str(current_task.request.id or "")
        # a second step sent for one batch stops before it touches the lease: arriving after the run's
        # end (its lease released), a renewal would take the lease back
        if join is not None and not claim_join(coord.client, name, join, task_id):
            return "joined already"
        if not renewed(coord, lease):
            return "stale: lease lost"
        while True:
            claimed, step_env = time.time(), env()
            fan = Fanout(lambda specs, batch: lanes(name, specs, batch, lease))
            out = run_step(step_env, name, send=fan.early)
            sealed, early = 0, 0
            while out.status == "pending":
                if not renewed(coord, lease):
                    return "stale: lease lost"
                batch = fan.seal(coord.client, name, out.pending)
                key = out.pending[0].get("suite_key")
                # the trials sent early may all be stored already (they ran beside the drafts): judge here
                if not fan.sent or not (
                    failed(coord.client, name, fan.id) or joined(step_env.store, name, batch, _str(key))
                ):
                    break
                if not claim_join(coord.client, name, fan.id, task_id):
                    return "joined already"
                sealed, early = sealed + 1, early + len(fan.sent)
                fan = Fanout(lambda specs, batch: lanes(name, specs, batch, lease))
                out = run_step(step_env, name, send=fan.early)
            if not renewed(coord, lease):
                return "stale: lease lost"
            ran = time.time()
            going_on = out.status == "running"  # the next round starts here, not in a new task
            try:
                if not going_on:
                    return sent(name, out, lease)
            finally:
                timeline.record(
                    kind="step",
                    start=start,
                    claimed=claimed,
                    ran=ran,
                    end=time.time(),
                    t=next((pt for pt, p, _ in step_env.phases if p == "load"), out.t),  # the state's before
                    status=out.status,
                    trials=len(out.pending),
                    early=early + len(fan.sent),
                    joined_here=sealed,
                    join=join is not None,
                    phases=[[pt, p, round(sec, 4)] for pt, p, sec in step_env.phases],
                )
            start, join = time.time(), None

    def lanes(name: str, specs: list[dict[str, Any]], batch: dict[str, Any], lease: Lease | None) -> None:
        """Push ``specs`` onto the batch's queue, then send ``eval_parallel × trial_parallel``
        ``evolve_trial`` lanes (the round's slots; fewer when fewer trials) carrying the queue's id and
        ``batch``, published in one round trip (:mod:`rsi_worker.cluster.evolve_queue`)."""
        t_send = time.time()
        key = specs[0].get("suite_key")
        config = MEMO.static(env().sessions, name, _str(key)).config
        n = max(1, min(len(specs), config.eval_parallel * config.trial_parallel))
        queue_id = str(batch["id"])
        push(ctx.runtime().coord.client, name, queue_id, specs)
        queue = TASK_QUEUES[TASK_EVOLVE_TRIAL]
        with app.producer_or_acquire() as producer, _batched(producer):
            for _ in range(n):
                app.signature(
                    TASK_EVOLVE_TRIAL,
                    args=(name, {"queue": queue_id, "join": batch}, *lease_args(lease)),
                    queue=queue,
                    ignore_result=True,  # joined in SQL: nothing reads the lanes' results
                ).apply_async(producer=producer)
        timeline.record(kind="send", start=t_send, end=time.time(), n=n, trials=len(specs))

    def sent(name: str, out: RunOutcome, lease: Lease | None) -> str:
        """What follows a step's last outcome (never ``running``: the step goes on itself): its trials,
        sent by its batch (:class:`Fanout`), or the run's end (the lease is released)."""
        if out.status == "pending":
            return f"{len(out.pending)} trials"
        release(ctx.runtime().coord, lease)
        return out.status

    def join_step(name: str, batch: dict[str, Any] | None, key: str | None, lease: Lease | None) -> None:
        """Send the next step when the batch is sealed and complete in SQL (module docstring)."""
        whole = sealed_batch(ctx.runtime().coord.client, name, batch) if batch else None
        if whole and joined(env().store, name, whole, key):
            step_signature(app, name, lease, str(whole["id"])).apply_async(task_id=uuid.uuid4().hex)

    @task(
        app,
        chain,
        TASK_EVOLVE_TRIAL,
        Policy(
            capped=lambda call: {"status": "redelivery_cap"},
            failed=lambda call, exc: {"status": "error", "error": error_record(exc)},
        ),
    )
    def evolve_trial(
        name: str,
        spec: dict[str, Any],
        agent: str | None = None,
        token: str | None = None,
        fence: int | None = None,
        io: str | None = None,
    ) -> dict[str, Any]:
        """A lane of trials, one after the other: ``spec`` is ``{queue, join}`` (the lane takes its
        batch's queued specs until the queue is empty), ``{specs, join}`` (those specs) or one spec;
        never raises. Idempotency key: each trial row's slot and attempt (a redelivered lane first runs
        what it had taken, and answers stored slots from their rows). A lane of a replaced chain (its
        lease lost) stops. Then the in-band join: the lane that finds its batch complete sends the next
        step; a lane whose trial failed sends it too (the step runs again what is not stored, as a chord
        body would). A lane that ran nothing (its queue was empty) has nothing to join."""
        lease = _lease(agent, token, fence, io)
        queue_id = _str(spec.get("queue"))
        own: list[dict[str, Any]] = list(spec["specs"]) if "specs" in spec else ([] if queue_id else [spec])
        batch = spec.get("join")
        client = ctx.runtime().coord.client
        lane = str(current_task.request.id or "")
        outs: list[dict[str, Any]] = []
        key: str | None = None
        for one in lane_specs(client, name, queue_id, lane, own):
            start = time.time()
            if not renewed(ctx.runtime().coord, lease):
                return {"status": "stale"}
            key = key or _str(one.get("suite_key"))
            marks: dict[str, float] = {}
            try:
                out = run_trial_spec(env(), name, one, marks)
            except Exception as exc:
                log.warning("evolve trial of %s failed: %s", name, type(exc).__name__)
                if batch:  # the step runs again what is not stored; an unsealed batch's step goes on
                    mark_failed(client, name, str(batch["id"]))
                    if sealed_batch(client, name, batch) is not None:
                        step = step_signature(app, name, lease, str(batch["id"]))
                        step.apply_async(task_id=uuid.uuid4().hex)
                raise
            outs.append(out)
            if timeline.on:
                timeline.record(
                    kind="trial",
                    start=start,
                    **marks,
                    done=time.time(),
                    end=time.time(),
                    t=int(one["t"]),
                    candidate=str(one["candidate"]),
                    status=str(out.get("status")),
                )
        done = time.time()
        if outs:
            join_step(name, batch, key, lease)
            timeline.record(kind="join", done=done, end=time.time(), trials=len(outs))
        if queue_id:
            release_taken(client, name, queue_id, lane)
        if len(outs) == 1 and "specs" not in spec and not queue_id:
            return outs[0]
        return {"status": "lane", "trials": outs}
