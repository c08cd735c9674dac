"""What a streamed turn tells its host as it runs (docs/host/agent.md#streaming).

:func:`~rsi_common.kernel.run_turn` takes an ``on_event`` callback; with it, the turn's main model
calls stream and the host receives, in order: :class:`TextDelta` (and :class:`ThinkingDelta`) pieces
as the model's chunks arrive, :class:`StepReset` when a failed attempt's partial output is void
(the kernel retries the call), :class:`ToolCall` for each call the model made, once the call is
whole (assembled from its streamed pieces), and :class:`ToolResultEvent` once the tool returned.
Callbacks run on the thread that runs the turn; an exception raised by one is logged and the turn
goes on (a host display never fails a turn).

Everything an event carries is also in the turn's transcript; nothing here is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["EventSink", "StepReset", "TextDelta", "ThinkingDelta", "ToolCall", "ToolResultEvent", "TurnEvent"]


@dataclass(frozen=True)
class TextDelta:
    """A piece of the answer text of main step ``step`` (0-based), as the model sent it."""

    text: str
    step: int


@dataclass(frozen=True)
class ThinkingDelta:
    """A piece of the visible reasoning of main step ``step``."""

    text: str
    step: int


@dataclass(frozen=True)
class StepReset:
    """The partial output streamed so far for ``step`` is void: the attempt failed (``reason``,
    the error class) and the kernel calls the model again."""

    step: int
    reason: str


@dataclass(frozen=True)
class ToolCall:
    """A whole tool call of main step ``step``: its id, tool name and input object."""

    id: str
    name: str
    input: Any
    step: int


@dataclass(frozen=True)
class ToolResultEvent:
    """What tool call ``id`` returned (the content the model sees; ``is_error`` for a failure)."""

    id: str
    name: str
    content: str | list[dict[str, Any]]
    is_error: bool
    step: int


TurnEvent = TextDelta | ThinkingDelta | StepReset | ToolCall | ToolResultEvent
"""The events of a streamed turn."""

EventSink = Callable[[TurnEvent], None]
"""The host's callback."""
