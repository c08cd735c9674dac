"""The agent runtime's Celery tasks ``rsi.agent_turn`` and ``rsi.tick`` on queue ``agents``
(docs/runtime/README.md#turns).

A thin shell: it builds the process's :class:`~rsi_common.runtime.turns.TurnEnv` once (the worker's
engine and Redis client, a recording client whose consolidation hand-off goes to the
``consolidate`` queue, the policy model of the worker's model factory) and runs one slice. Workers
serve it with ``rsi worker -Q agents -P threads``; a turn waits on nothing (a wait yields), so any
pool size ≥ 1 completes a tree.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery

from rsi_common.client import RsiClient
from rsi_common.dispatch import QUEUE_AGENTS, TASK_AGENT_TURN, TASK_TICK, KombuDispatcher
from rsi_common.runtime.tick import tick
from rsi_common.runtime.turns import TurnEnv, marked_wake, run_session_turn
from rsi_worker.cluster.middleware import Middleware, Policy, task
from rsi_worker.cluster.worker import WorkerContext

__all__ = ["register_agent_tasks"]


def register_agent_tasks(app: Celery, ctx: WorkerContext, chain: list[Middleware]) -> None:
    """Register ``rsi.agent_turn`` on ``app`` through the one task wrapper."""
    state: dict[int, TurnEnv] = {}
    lock = threading.Lock()

    def env() -> TurnEnv:
        with lock:
            rt = ctx.runtime()
            key = id(rt)
            if key not in state:
                dispatcher = KombuDispatcher(str(ctx.settings.redis_url), transport_options={
                    "visibility_timeout": ctx.settings.visibility_timeout_s})
                client = RsiClient(ctx.settings, engine=rt.engine, redis=rt.redis, dispatcher=dispatcher)

                def enqueue(agent: str, session: str) -> None:
                    dispatcher.enqueue(TASK_AGENT_TURN, [agent, session], QUEUE_AGENTS)

                models = rt.deps.models

                def policy(provider: str, model: str) -> Any:
                    return models(provider, model, "policy")

                model = policy(ctx.settings.default_provider, ctx.settings.default_model)
                state.clear()
                state[key] = TurnEnv(client, ctx.settings.runtime, model, marked_wake(rt.redis, enqueue),
                                     models=policy)
            return state[key]

    @task(app, chain, TASK_AGENT_TURN, Policy(capped=lambda call: {"outcome": "redelivery_cap"}))
    def agent_turn(agent: str, session: str) -> dict[str, Any]:
        """One slice of ``agent``'s ``session``. Idempotency key: the io ``{session}:{n}[+k]`` — a
        second delivery finds the lease held (``busy``), nothing to do (``empty``/``waiting``), or the
        io's world stored, and commits from it without calling the model (docs/runtime/README.md D13)."""
        out = run_session_turn(env(), str(agent), str(session))
        return {"outcome": out.outcome, "io": out.io, "status": out.status}

    @task(app, chain, TASK_TICK, Policy(capped=lambda call: {"skipped": "redelivery cap"}))
    def tick_task() -> dict[str, Any]:
        """The runtime's periodic pass (``rsi_common.runtime.tick``). Idempotent: every action is
        conditional on current state; a wake of a session already marked enqueues nothing."""
        return tick(env()).to_json()
