"""The evolve run on the cluster (docs/algorithm/evolve.md#on-the-cluster): a chain of ``evolve_step``
tasks, each fanning out its pending trials as a chord of ``evolve_trial`` tasks on the ``replay``
queue whose body is the next ``evolve_step``.

    evolve_step ─► chord(evolve_trial × pending slots) ─► evolve_step ─► … ─► evolve_step (round judged)
                ─► evolve_step (next round) ─► … ─► done | stopped | failed

No task waits on another. ``evolve_trial`` never raises (a chord member); its idempotency key is the
trial row's ``(evolve, t, candidate, task, trial, attempt)``. ``evolve_step`` recomputes everything
from stored rows (drafts, analyses and trials are stored as they are made), so a redelivered step
decides the same and a killed worker's trials are simply run again by the next step.

Every task carries the chain's lease (``agent``, ``token``, ``fence``, ``io``;
:mod:`rsi_worker.cluster.evolve_watch`): it renews it when it starts (the heartbeat renews it while a
long one runs) and stops at once when the renewal fails — the sweeper replaced a chain that stopped
beating, and the new chain does the work. The step that ends the run releases the lease.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, chord

from rsi_common.coord import Lease
from rsi_common.dispatch import TASK_EVOLVE_STEP, TASK_EVOLVE_TRIAL, TASK_QUEUES
from rsi_common.stored import error_record
from rsi_worker.cluster.evolve_watch import lease_args, release, renewed
from rsi_worker.cluster.middleware import Middleware, Policy, TaskCall, task
from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.evolve.engine import EvolveEnv, run_step, run_trial_spec

__all__ = ["register_evolve", "step_signature"]


def step_signature(app: Celery, name: str, lease: Lease | None = None) -> Any:
    """The ``evolve_step`` of run ``name`` carrying ``lease`` (as a chord body it receives the
    members' results first)."""
    queue = TASK_QUEUES[TASK_EVOLVE_STEP]
    return app.signature(TASK_EVOLVE_STEP, args=(name, *lease_args(lease)), queue=queue)


def _lease(agent: str | None, token: str | None, fence: int | None, io: str | None) -> Lease | None:
    if agent is None or token is None or fence is None:
        return None
    return Lease(str(agent), str(token), int(fence), str(io or ""))


def register_evolve(app: Celery, ctx: WorkerContext, chain: list[Middleware]) -> None:
    """Register ``evolve_step`` and ``evolve_trial`` on ``app`` through the task wrapper ``chain``."""

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
    ) -> str:
        """One step of the run (chain link and chord body). Idempotent: recomputed from stored rows.
        A step whose lease is no longer held (a newer chain runs) stops before anything."""
        coord = ctx.runtime().coord
        lease = _lease(agent, token, fence, io)
        if not renewed(coord, lease):
            return "stale: lease lost"
        out = run_step(env(), name)
        if not renewed(coord, lease):
            return "stale: lease lost"
        if out.status == "pending":
            queue = TASK_QUEUES[TASK_EVOLVE_TRIAL]
            header = [
                app.signature(TASK_EVOLVE_TRIAL, args=(name, spec, *lease_args(lease)), queue=queue)
                for spec in out.pending
            ]
            chord(header)(step_signature(app, name, lease))
            return f"{len(header)} trials"
        if out.status == "running":
            app.send_task(
                TASK_EVOLVE_STEP, args=[[], name, *lease_args(lease)], queue=TASK_QUEUES[TASK_EVOLVE_STEP]
            )
            return f"next step (t={out.t})"
        release(coord, lease)
        return out.status

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
        """One trial (chord member; never raises). Idempotency key: the trial row's slot and attempt.
        A trial of a replaced chain (its lease lost) is not run."""
        if not renewed(ctx.runtime().coord, _lease(agent, token, fence, io)):
            return {"status": "stale"}
        return run_trial_spec(env(), name, spec)
