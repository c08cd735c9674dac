"""The Dream sweep on the cluster (docs/dream/evaluation.md#fan-out): one task per chunk of replay
episodes, on the ``replay`` queue, and :class:`CeleryExecutor`, the evaluator's executor that fans
a batch of episodes out as a group and gathers the results in job order.

Results leave a worker as briefs (``rsi_worker.cluster.events``), so each episode is written to SQL
(``rsi_dream_episodes`` under the cycle id and label) by the worker that ran it, and the executor
reads the chunk's episodes back from there. Idempotency key: ``(cycle_id, label, world_id, β)`` —
an episode is a pure function of (policy code, world, β, evaluator parameters) and the first stored
row wins, so a redelivered chunk (a worker killed mid-sweep) stores nothing new and answers the same.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from celery import Celery, group
from celery.exceptions import TimeoutError as CeleryTimeout
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db.dream import dream_episodes, save_dream_episode
from rsi_common.dispatch import TASK_DREAM_EPISODES, TASK_QUEUES
from rsi_common.stored import error_record
from rsi_worker.cluster.middleware import Middleware, Policy, default_chain, task
from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.dream.evaluate import EvalParams, beta_key, run_job
from rsi_worker.dream.policies import PolicyCode
from rsi_worker.dream.tree import TreeWorld, load_world

__all__ = ["CeleryExecutor", "register_dream"]


def register_dream(app: Celery, ctx: WorkerContext, chain: list[Middleware] | None = None) -> None:
    """Register ``rsi.dream_episodes`` on ``app`` (wrapped like every task)."""
    chain = default_chain(ctx) if chain is None else chain

    @task(
        app,
        chain,
        TASK_DREAM_EPISODES,
        Policy(
            capped=lambda call: {"status": "redelivery_cap"},
            failed=lambda call, exc: {"status": "error", "error": error_record(exc)},
        ),
        keep_result=True,  # the cycle waits on the group's results (CeleryExecutor)
    )
    def dream_episodes_task(
        cycle_id: str,
        label: str,
        code: dict[str, Any],
        worlds: list[dict[str, Any]],
        betas: list[float],
        params: dict[str, Any],
    ) -> dict[str, Any]:
        """Replay ``code`` on each ``(worlds[i], betas[i])`` and store each episode; never raises."""
        policy = PolicyCode.from_json(code)
        p = EvalParams.from_json(params)
        sessions = ctx.runtime().sessions
        with sessions() as s:
            done = dream_episodes(s, cycle_id, label)
        for w, b in zip(worlds, betas, strict=True):
            world = load_world(w)
            if (world.world_id, beta_key(float(b))) in done:
                continue
            result = run_job(policy, world, float(b), p)
            with sessions.begin() as s:
                save_dream_episode(s, cycle_id, label, world.world_id, beta_key(float(b)), result)
        return {"status": "ok", "episodes": len(worlds)}


class CeleryExecutor:
    """Fan episodes out as ``rsi.dream_episodes`` tasks of ``chunk`` episodes each, wait, and read
    the episodes the workers stored under ``cycle_id``.

    A chunk whose message a killed worker took off the broker before acknowledging it is never
    answered (docs/operations/recovery-bounds.md): after ``resubmit_s`` without every answer, the
    chunks whose episodes are not all stored are sent again (a chunk skips stored episodes, so a
    late original does no harm), until ``timeout_s``."""

    def __init__(
        self,
        app: Celery,
        sessions: sessionmaker[Session],
        cycle_id: str,
        *,
        chunk: int = 4,
        timeout_s: float = 600.0,
        resubmit_s: float = 60.0,
    ) -> None:
        self.app, self.sessions, self.cycle_id = app, sessions, cycle_id
        self.chunk, self.timeout_s, self.resubmit_s = max(1, chunk), timeout_s, resubmit_s

    def run(
        self, code: PolicyCode, jobs: Sequence[tuple[TreeWorld, float]], params: EvalParams, label: str = ""
    ) -> list[dict[str, Any]]:
        """Every job's result JSON, in job order.

        Raises:
            RuntimeError: a chunk answered an error or hit the redelivery cap, or an episode is missing.
        """
        if not jobs:
            return []
        label = label or "episodes"
        parts = [jobs[i : i + self.chunk] for i in range(0, len(jobs), self.chunk)]
        sigs = [
            self.app.signature(
                TASK_DREAM_EPISODES,
                queue=TASK_QUEUES[TASK_DREAM_EPISODES],
                args=(
                    self.cycle_id,
                    label,
                    code.to_json(),
                    [w.to_json() for w, _ in part],
                    [b for _, b in part],
                    params.to_json(),
                ),
            )
            for part in parts
        ]
        deadline = time.monotonic() + self.timeout_s
        waiting = group(sigs).apply_async()
        while True:
            try:
                answers = waiting.get(timeout=max(0.1, min(self.resubmit_s, deadline - time.monotonic())),
                                      disable_sync_subtasks=False)
                break
            except CeleryTimeout:
                if time.monotonic() >= deadline:
                    raise
                with self.sessions() as s:
                    stored = dream_episodes(s, self.cycle_id, label)
                again = [sig.clone() for sig, part in zip(sigs, parts, strict=True)
                         if any((w.world_id, beta_key(b)) not in stored for w, b in part)]
                if not again:  # every episode is stored: the answers left are of done chunks
                    answers = []
                    break
                waiting = group(again).apply_async()
        bad = [a for a in answers if not isinstance(a, dict) or a.get("status") != "ok"]
        if bad:
            raise RuntimeError(f"a dream episode chunk failed: {str(bad[0])[:300]}")
        with self.sessions() as s:
            stored = dream_episodes(s, self.cycle_id, label)
        missing = [w.world_id for w, b in jobs if (w.world_id, beta_key(b)) not in stored]
        if missing:
            raise RuntimeError(f"{len(missing)} episode(s) were not stored, e.g. {missing[0]}")
        return [stored[(w.world_id, beta_key(b))] for w, b in jobs]
