"""The turn's tool registry and the kernel's built-in live tool ``ToolSearch`` (docs/formats.md §7.1).

The registry keeps tools in registration order; that order is the order of the request's tool
list, so a replay that registers the recorded definitions in recorded order (and the harness's
contributed tools after them, as live turns do) sends the same tool list.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

from rsi_common.kernel.types import ToolDef, ToolOutput, ToolResult

__all__ = ["BUILTIN_LIVE_TOOLS", "TOOL_SEARCH", "ToolRegistry", "tool_search_def"]

TOOL_SEARCH = "ToolSearch"

_TOOL_SEARCH_DESCRIPTION = (
    "Activate deferred tools. Give words that the tool's name or description contains; every "
    "deferred tool matching all words (case-insensitive) becomes available and its name is returned."
)
_TOOL_SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "Words to look for."}},
    "required": ["query"],
}


class ToolRegistry:
    """Ordered tool definitions with activation state and a change counter.

    Thread-safe for activation (``ToolSearch`` may run inside a parallel batch).
    """

    def __init__(self) -> None:
        self._tools: dict[str, ToolDef] = {}
        self._activated: set[str] = set()
        self._contributed: list[str] = []
        self._lock = threading.RLock()
        self.version = 0
        """Incremented on every registration or activation (exposure caches key on it)."""

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[ToolDef]:
        return iter(list(self._tools.values()))

    def get(self, name: str) -> ToolDef | None:
        """The definition registered under ``name``, or None."""
        return self._tools.get(name)

    def register(self, tool: ToolDef, *, contributed: bool = False) -> None:
        """Add ``tool`` (a later registration of the same name replaces the earlier one in place).

        Contributed tools (harness hooks, docs/formats.md §7.1) are registered as core and listed as
        contributed.
        """
        with self._lock:
            if contributed:
                tool = dataclasses.replace(tool, core=True)
                if tool.name not in self._contributed:
                    self._contributed.append(tool.name)
            self._tools[tool.name] = tool
            if tool.activated:
                self._activated.add(tool.name)
            self.version += 1

    def activate(self, name: str) -> bool:
        """Activate a registered deferred tool; True when this changed anything."""
        with self._lock:
            tool = self._tools.get(name)
            if tool is None or tool.core or name in self._activated:
                return False
            self._activated.add(name)
            self.version += 1
            return True

    def is_activated(self, name: str) -> bool:
        """The tool is core or activated (exposed by default)."""
        tool = self._tools.get(name)
        return tool is not None and (tool.core or name in self._activated)

    def deferred(self) -> list[ToolDef]:
        """Tools that are neither core nor activated, in registry order."""
        return [t for t in self._tools.values() if not t.core and t.name not in self._activated]

    def contributed(self) -> list[str]:
        """Names of harness-contributed tools, sorted."""
        return sorted(self._contributed)

    def search(self, query: str) -> list[str]:
        """Activate every deferred tool whose name or description contains all words of ``query``."""
        words = [w.lower() for w in str(query).split()]
        hits: list[str] = []
        with self._lock:
            for tool in self.deferred():
                hay = f"{tool.name}\n{tool.description}".lower()
                if all(w in hay for w in words):
                    self.activate(tool.name)
                    hits.append(tool.name)
        return hits


def tool_search_def(registry: ToolRegistry) -> ToolDef:
    """The built-in live tool ``ToolSearch`` bound to ``registry``; it reads only the registry."""

    def execute(tool_input: dict[str, Any]) -> ToolOutput:
        hits = registry.search(str(tool_input.get("query", "")))
        if not hits:
            return ToolResult("No deferred tool matches this query.", is_error=False)
        return "Activated tools: " + ", ".join(hits)

    return ToolDef(
        name=TOOL_SEARCH,
        description=_TOOL_SEARCH_DESCRIPTION,
        input_schema=_TOOL_SEARCH_SCHEMA,
        core=True,
        live=True,
        executor=execute,
    )


BUILTIN_LIVE_TOOLS = frozenset({TOOL_SEARCH})
"""Names of the kernel's built-in live tools (docs/formats.md §7.1); only these may carry ``live=True``."""
