"""The ``at_most_once`` journal ``rsi:{a}:effects:{io}`` (docs/runtime/failures.md#at-most-once-tools).

A toolset names the tools whose effect must not happen twice (``Toolset.at_most_once``). Before such a
tool runs, the attempt appends ``{tool_use_id}:{tool}`` to the journal of its io. A later attempt of
the same io (a crash re-run) that finds the journal non-empty and no world stored for the io cannot
know whether the effect happened, so it fails the io with ``UNCERTAIN_SIDE_EFFECT`` instead of running
the tool again (:mod:`rsi_common.runtime.attempts`).

The attempt a turn runs is a context variable set by the turn (:func:`entered`) and read once, when the
toolset's tools are built for the turn's plan, so tools that the kernel runs on a pool thread journal
under the right io.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from rsi_common.kernel.runner import CURRENT_TOOL_USE_ID
from rsi_common.kernel.types import ToolDef
from rsi_common.runtime import keys

__all__ = ["EFFECTS_TTL_S", "UNCERTAIN", "Attempt", "current", "entered", "journaled", "started"]

UNCERTAIN = "UNCERTAIN_SIDE_EFFECT"
EFFECTS_TTL_S = 7 * 86_400
"""A journal outlives every re-run of its io (it is evidence for the operator too)."""


@dataclass(frozen=True)
class Attempt:
    """The io a turn attempt runs, and the toolset its tools come from."""

    redis: Any
    agent: str
    io: str
    toolset: str = "sim"


_CURRENT: ContextVar[Attempt | None] = ContextVar("rsi_runtime_attempt", default=None)


@contextmanager
def entered(attempt: Attempt) -> Iterator[Attempt]:
    """Make ``attempt`` the current one for the block (the turn's body)."""
    token = _CURRENT.set(attempt)
    try:
        yield attempt
    finally:
        _CURRENT.reset(token)


def current() -> Attempt | None:
    """The attempt of the running turn, ``None`` outside a turn."""
    return _CURRENT.get()


def started(redis: Any, agent: str, io: str) -> list[str]:
    """The journal of ``io``: ``{tool_use_id}:{tool}`` of every ``at_most_once`` call started."""
    raw = redis.lrange(keys.effects(agent, io), 0, -1)
    return [v.decode() if isinstance(v, bytes) else str(v) for v in raw]


def journaled(tool: ToolDef, attempt: Attempt) -> ToolDef:
    """``tool`` whose executor appends to the journal of ``attempt``'s io before it runs."""
    inner = tool.executor
    if inner is None:
        return tool
    name, key = tool.name, keys.effects(attempt.agent, attempt.io)

    def run(args: dict[str, Any]) -> Any:
        pipe = attempt.redis.pipeline(transaction=True)
        pipe.rpush(key, f"{CURRENT_TOOL_USE_ID.get()}:{name}")
        pipe.expire(key, EFFECTS_TTL_S)
        pipe.execute()
        return inner(args)

    return replace(tool, executor=run)
