"""What an ``Agent`` turn returns, and the last event of a streamed one (docs/host/agent.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rsi_common.kernel import TurnEvent, TurnResult

__all__ = ["AgentEvent", "AgentResult", "FinalResult", "tool_calls_of"]


@dataclass(frozen=True)
class AgentResult:
    """One turn of an agent.

    Attributes:
        answer: the settled answer text.
        status: ``completed``, ``suspended``, ``blocked``, ``failed`` or ``cancelled``.
        conversation: the conversation id the turn belongs to.
        io_id: the turn's id (``feedback`` and ``correct`` name it).
        tool_calls: ``{id, name, input, content, is_error}`` per tool call, in order.
        usage: billing usage of the turn's main model calls (``calls``, ``input_tokens``, …).
        recorded: the turn was stored for consolidation (else ``record_error`` says why).
        record_error: why the turn was not recorded, ``""`` when it was.
        history_error: why the turn was not added to the conversation history, ``""`` when it was.
        turn: the kernel's whole :class:`~rsi_common.kernel.TurnResult` (world, trajectory, ledger).
    """

    answer: str
    status: str
    conversation: str
    io_id: str
    tool_calls: list[dict[str, Any]]
    usage: dict[str, int]
    recorded: bool
    record_error: str
    turn: TurnResult = field(repr=False)
    history_error: str = ""

    @property
    def error(self) -> str:
        """``"<reason>: <message>"`` when the turn failed, else ``""``."""
        return self.turn.error


@dataclass(frozen=True)
class FinalResult:
    """The last event of a streamed turn: its whole result (the recorded turn inside)."""

    result: AgentResult


AgentEvent = TurnEvent | FinalResult
"""What ``Agent.stream`` / ``Agent.astream`` yield."""


def tool_calls_of(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls of a turn's transcript with the result each got, in call order."""
    results: dict[str, dict[str, Any]] = {}
    calls: list[dict[str, Any]] = []
    for message in transcript:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and message.get("role") == "assistant":
                calls.append(block)
            elif block.get("type") == "tool_result":
                results[str(block.get("tool_use_id", ""))] = block
    out = []
    for call in calls:
        got = results.get(str(call.get("id", "")), {})
        out.append({"id": call.get("id", ""), "name": call.get("name", ""), "input": call.get("input"),
                    "content": got.get("content"), "is_error": bool(got.get("is_error", False))})
    return out
