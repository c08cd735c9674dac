"""The evolve run on the cluster (docs/algorithm/evolve.md#on-the-cluster): a chain of ``evolve_step``
tasks, each fanning out its pending trials as a chord of ``evolve_trial`` tasks on the ``replay``
queue whose body is the next ``evolve_step``.

    evolve_step ─► chord(evolve_trial × pending slots) ─► evolve_step ─► … ─► evolve_step (round judged)
                ─► evolve_step (next round) ─► … ─► done | stopped | failed

No task waits on another. ``evolve_trial`` never raises (a chord member); its idempotency key is the
trial row's ``(evolve, t, candidate, task, trial, attempt)``. ``evolve_step`` recomputes everything
from stored rows (drafts, analyses and trials are stored as they are made), so a redelivered step
decides the same and a killed worker's trials are simply run again by the next step.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, chord

from rsi_common.dispatch import TASK_EVOLVE_STEP, TASK_EVOLVE_TRIAL, TASK_QUEUES
from rsi_common.stored import error_record
from rsi_worker.cluster.middleware import Middleware, Policy, TaskCall, task
from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.evolve.engine import EvolveEnv, run_step, run_trial_spec

__all__ = ["register_evolve", "step_signature"]


def step_signature(app: Celery, name: str) -> Any:
    """The ``evolve_step`` of run ``name`` (as a chord body it receives the members' results first)."""
    return app.signature(TASK_EVOLVE_STEP, args=(name,), queue=TASK_QUEUES[TASK_EVOLVE_STEP])


def register_evolve(app: Celery, ctx: WorkerContext, chain: list[Middleware]) -> None:
    """Register ``evolve_step`` and ``evolve_trial`` on ``app`` through the task wrapper ``chain``."""

    def env() -> EvolveEnv:
        rt = ctx.runtime()
        return EvolveEnv(rt.sessions, rt.deps.models, ctx.settings)

    def step_failed(call: TaskCall, exc: BaseException) -> str:
        name = str(call.arguments.get("name"))
        try:
            env().store.set_run(name, status="failed")
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
    def evolve_step(_results: Any, name: str) -> str:
        """One step of the run (chain link and chord body). Idempotent: recomputed from stored rows."""
        out = run_step(env(), name)
        if out.status == "pending":
            header = [
                app.signature(TASK_EVOLVE_TRIAL, args=(name, spec), queue=TASK_QUEUES[TASK_EVOLVE_TRIAL])
                for spec in out.pending
            ]
            chord(header)(step_signature(app, name))
            return f"{len(header)} trials"
        if out.status == "running":
            app.send_task(TASK_EVOLVE_STEP, args=[[], name], queue=TASK_QUEUES[TASK_EVOLVE_STEP])
            return f"next step (t={out.t})"
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
    def evolve_trial(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """One trial (chord member; never raises). Idempotency key: the trial row's slot and attempt."""
        return run_trial_spec(env(), name, spec)
