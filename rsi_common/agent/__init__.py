"""The host's easy path: :class:`Agent` (docs/host/agent.md).

* :mod:`~rsi_common.agent.facade` — :class:`Agent`: run, stream, tools, history, feedback;
* :mod:`~rsi_common.agent.tools` — tools from typed functions;
* :mod:`~rsi_common.agent.workspace` — sandboxed file tools of a directory;
* :mod:`~rsi_common.agent.host` — where turns are recorded (library, HTTP, embedded default);
* :mod:`~rsi_common.agent.streams` — a turn on a thread, its events to a sync or async consumer;
* :mod:`~rsi_common.agent.results` — :class:`AgentResult`, :class:`FinalResult`.

This package is the top floor of ``rsi_common``: nothing else in ``rsi_common`` imports it except
the package root's lazy ``Agent`` attribute (docs/dev/layout.md).
"""

from __future__ import annotations

from rsi_common.agent.facade import DEFAULT_CONVERSATION, HISTORY_RETENTION, HISTORY_TURNS, Agent
from rsi_common.agent.results import AgentEvent, AgentResult, FinalResult
from rsi_common.agent.tools import tool_def
from rsi_common.agent.workspace import workspace_tools
from rsi_common.kernel.events import StepReset, TextDelta, ThinkingDelta, ToolCall, ToolResultEvent

__all__ = [
    "DEFAULT_CONVERSATION",
    "HISTORY_RETENTION",
    "HISTORY_TURNS",
    "Agent",
    "AgentEvent",
    "AgentResult",
    "FinalResult",
    "StepReset",
    "TextDelta",
    "ThinkingDelta",
    "ToolCall",
    "ToolResultEvent",
    "tool_def",
    "workspace_tools",
]
