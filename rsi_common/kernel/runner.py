"""The kernel's tool runner: executes a batch of tool calls through the registry (docs/formats.md §7.2 stage
tools).

Executors (docs/formats.md §5.6 *Tools*): ``sequential``; ``parallel`` — up to ``max_concurrency`` threads;
``partition`` — consecutive ``read_only`` calls run in parallel, every other call alone. Results
are always returned in call order. A host executor's exception becomes an error result
``"<Type>: <message>"``; it never ends the turn. A host result holding text that is not valid
Unicode (a lone surrogate such as ``"\ud800"``, which no model request can carry) has each such
character replaced by U+FFFD, so the model still answers and the world stays recordable
(``docs/operations/failure-recovery.md``, *Capture errors*).
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from rsi_common.kernel.tool_registry import ToolRegistry
from rsi_common.kernel.types import ToolResult, TurnYield
from rsi_common.stored import repair

__all__ = ["CURRENT_TOOL_USE_ID", "ExecutedCall", "ToolRunner"]

CURRENT_TOOL_USE_ID: ContextVar[str] = ContextVar("rsi_current_tool_use_id", default="")
"""The ``tool_use`` id of the call an executor is running (executors that key idempotent writes
on it read it, e.g. the runtime tools of docs/runtime/subagents.md)."""


@dataclass(frozen=True)
class ExecutedCall:
    """One executed call: what the model asked and the result it will see."""

    tool_use_id: str
    name: str
    input: Any
    content: str | list[dict[str, Any]]
    is_error: bool
    repaired: int = 0
    """Characters of the host's result replaced by U+FFFD (recorded in the world's ``defects``)."""
    pending: dict[str, Any] | None = None
    """The executor raised :class:`~rsi_common.kernel.types.TurnYield`: its wait (no result yet)."""

    def result_block(self) -> dict[str, Any]:
        """The ``tool_result`` block for the next user message."""
        return {"type": "tool_result", "tool_use_id": self.tool_use_id, "content": self.content,
                "is_error": self.is_error}

    def record(self) -> dict[str, Any]:
        """The world's ``tools.calls`` entry ``{tool_use_id, name, input, content, is_error}``."""
        return {"tool_use_id": self.tool_use_id, "name": self.name, "input": copy.deepcopy(self.input),
                "content": copy.deepcopy(self.content), "is_error": self.is_error}


class ToolRunner:
    """Runs tool calls of one turn against ``registry``."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    def execute(self, call: dict[str, Any], exposed: Collection[str]) -> ExecutedCall:
        """Run one ``tool_use`` block (never raises for tool failures)."""
        name = str(call.get("name", ""))
        tool_input = call.get("input")
        tool = self.registry.get(name)
        content: Any
        if tool is None:
            content, is_error = f"[kernel] unknown tool '{name}'", True
        elif name not in exposed:
            content, is_error = f"[kernel] tool '{name}' is not available in this step", True
        elif tool.executor is None:
            content, is_error = f"[kernel] tool '{name}' has no executor", True
        else:
            arg = copy.deepcopy(tool_input) if isinstance(tool_input, dict) else {}
            token = CURRENT_TOOL_USE_ID.set(str(call.get("id", "")))
            try:
                out = tool.executor(arg)
            except TurnYield as y:  # the turn suspends once the batch is done (docs/runtime/subagents.md)
                return ExecutedCall(str(call.get("id", "")), name, tool_input, "", False, pending=y.wait)
            except Exception as exc:  # a failing tool is a result the model sees, not a turn failure
                content, is_error = f"{type(exc).__name__}: {exc}", True
            else:
                content, is_error = _normalize(out)
            finally:
                CURRENT_TOOL_USE_ID.reset(token)
            content, repaired = repair(content)  # text the model and the world can carry (module docstring)
            return ExecutedCall(str(call.get("id", "")), name, tool_input, content, is_error, repaired)
        return ExecutedCall(str(call.get("id", "")), name, tool_input, content, is_error)

    def run(self, calls: Sequence[dict[str, Any]], exposed: Collection[str], *, executor: str = "sequential",
            max_concurrency: int = 1) -> list[ExecutedCall]:
        """Execute ``calls``; results in call order."""
        if not calls:
            return []
        if executor == "parallel" and len(calls) > 1 and max_concurrency > 1:
            return self._parallel(calls, exposed, max_concurrency)
        if executor == "partition" and max_concurrency > 1:
            out: list[ExecutedCall] = []
            for group in self._partition(calls):
                if len(group) > 1:
                    out.extend(self._parallel(group, exposed, max_concurrency))
                else:
                    out.append(self.execute(group[0], exposed))
            return out
        return [self.execute(c, exposed) for c in calls]

    def _parallel(self, calls: Sequence[dict[str, Any]], exposed: Collection[str],
                  limit: int) -> list[ExecutedCall]:
        with ThreadPoolExecutor(max_workers=min(limit, len(calls)), thread_name_prefix="rsi-tool") as pool:
            return list(pool.map(lambda c: self.execute(c, exposed), calls))

    def _partition(self, calls: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        groups: list[list[dict[str, Any]]] = []
        run: list[dict[str, Any]] = []
        for call in calls:
            tool = self.registry.get(str(call.get("name", "")))
            if tool is not None and tool.read_only:
                run.append(call)
                continue
            if run:
                groups.append(run)
                run = []
            groups.append([call])
        if run:
            groups.append(run)
        return groups


def _normalize(out: Any) -> tuple[str | list[dict[str, Any]], bool]:
    if isinstance(out, ToolResult):
        return out.content, bool(out.is_error)
    if isinstance(out, str):
        return out, False
    if isinstance(out, list):
        return out, False
    return str(out), False
