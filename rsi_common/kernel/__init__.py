"""K0 — the fixed turn engine (docs/formats.md §7) and its registered components (docs/formats.md §5.6).

A harness configures K0 only through components (``rsi_common.kernel.components``); kernel
limits come from host kwargs and settings only. Live turns (:func:`run_turn`) and replays
(:func:`rsi_common.replay.replay_world`) run the same code path.
"""

from __future__ import annotations

from rsi_common.kernel.events import (
    EventSink,
    StepReset,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResultEvent,
    TurnEvent,
)
from rsi_common.kernel.ledger import PURPOSES, CallRecord, Ledger, TurnStop
from rsi_common.kernel.runner import ExecutedCall, ToolRunner
from rsi_common.kernel.runtime import TurnRuntime
from rsi_common.kernel.tool_registry import BUILTIN_LIVE_TOOLS, TOOL_SEARCH, ToolRegistry, tool_search_def
from rsi_common.kernel.turn import build_registry, run_turn, trajectory_record
from rsi_common.kernel.types import (
    DEFAULT_MAX_TOKENS,
    MODEL_DEFAULTS,
    Decision,
    MemoryProvider,
    ModelConfig,
    ParsedStep,
    RetryPolicy,
    ToolDef,
    ToolExecutor,
    ToolOutput,
    ToolResult,
    TurnPlan,
    TurnResult,
    TurnStatus,
)

__all__ = [
    "BUILTIN_LIVE_TOOLS",
    "DEFAULT_MAX_TOKENS",
    "MODEL_DEFAULTS",
    "PURPOSES",
    "TOOL_SEARCH",
    "CallRecord",
    "Decision",
    "EventSink",
    "ExecutedCall",
    "Ledger",
    "MemoryProvider",
    "ModelConfig",
    "ParsedStep",
    "RetryPolicy",
    "StepReset",
    "TextDelta",
    "ThinkingDelta",
    "ToolCall",
    "ToolDef",
    "ToolExecutor",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "ToolResultEvent",
    "ToolRunner",
    "TurnEvent",
    "TurnPlan",
    "TurnResult",
    "TurnRuntime",
    "TurnStatus",
    "TurnStop",
    "build_registry",
    "run_turn",
    "tool_search_def",
    "trajectory_record",
]
