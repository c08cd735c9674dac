"""The agent runtime's beat entry (docs/runtime/failures.md#beat-and-deploy, decisions D15, D17).

``rsi.tick`` goes on the beat schedule every ``RSI_RUNTIME__TICK_S`` only when
``RSI_RUNTIME__ENABLED`` says the cluster runs an ``agents`` pool; otherwise beat publishes nothing to
queue ``agents`` and existing deployments are unchanged. A tick that waits longer than two periods
(no ``agents`` worker) expires instead of piling up: every tick is a full pass, so none is owed.
"""

from __future__ import annotations

from typing import Any

from rsi_common.config import Settings
from rsi_common.dispatch import QUEUE_AGENTS, TASK_TICK

__all__ = ["runtime_beat"]


def runtime_beat(settings: Settings) -> dict[str, dict[str, Any]]:
    """The beat entries of the runtime: ``{"rsi-tick": …}`` when enabled, else none."""
    rt = settings.runtime
    if not rt.enabled:
        return {}
    return {"rsi-tick": {"task": TASK_TICK, "schedule": rt.tick_s,
                         "options": {"queue": QUEUE_AGENTS, "expires": 2 * rt.tick_s}}}
