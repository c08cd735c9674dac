"""Model factories of the real-worker stranding tests (``RSI_MODEL_FACTORY=tests.adversarial.
stranding_factories:<name>``) that inject a failure into one pipeline step of every worker process.

Each factory is called once per worker process (``WorkerContext.runtime``); besides returning the
default models it replaces one step function in :mod:`rsi_worker.cluster.tasks` by a wrapper that raises
once, across all processes, while the step's key is armed in Redis (:func:`armed_key`): the first
call that deletes the key (atomic ``DEL``) raises, every other call runs the real step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from rsi_common.config import Settings
from rsi_common.dispatch import redis_py_url
from rsi_worker.consolidate import ModelFactory, default_models


def armed_key(step: str) -> str:
    return f"rsi:test:fail-once:{step}"


def _fails_once(step: str, *, after: bool = False) -> Callable[[Settings], ModelFactory]:
    """``after``: the real step runs first (its writes are stored), then the failure is raised."""

    def factory(settings: Settings) -> ModelFactory:
        import rsi_worker.cluster.tasks as tasks

        client = redis.Redis.from_url(redis_py_url(str(settings.redis_url)))
        real = getattr(tasks, step)
        if getattr(real, "fails_once", False):
            return default_models(settings)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs) if after else None
            if client.delete(armed_key(step)):
                raise RuntimeError(f"injected failure of {step}")
            return out if after else real(*args, **kwargs)

        wrapped.fails_once = True  # type: ignore[attr-defined]
        setattr(tasks, step, wrapped)
        return default_models(settings)

    return factory


open_run_fails_once = _fails_once("open_run", after=True)
"""The ``consolidate`` task's step fails once, after its run row and context were stored."""
after_incumbent_fails_once = _fails_once("after_incumbent")
"""A chord body (``after_incumbent``, judge queue) fails once."""
judge_round_fails_once = _fails_once("judge_round")
"""The last chord body (``judge_round``, before the final write) fails once."""
