"""``ToolExposureComponent`` (kind ``client_tool``): which tools the model sees (docs/formats.md §5.6
*Tools*)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rsi_common.kernel.components.base import Component
from rsi_common.kernel.messages import tool_uses

if TYPE_CHECKING:
    from rsi_common.kernel.runtime import TurnRuntime
    from rsi_common.kernel.types import ToolDef

__all__ = ["EXECUTORS", "ToolExposureComponent"]

EXECUTORS: tuple[str, ...] = ("sequential", "parallel", "partition")


class ToolExposureComponent(Component):
    """Exposed = core ∪ activated tools (+ history restore, + family guides), in registry order.

    ``exposed_tools(rt)`` reads ``restore_from_history`` and ``gate_reachability``; the kernel's
    tool runner reads ``executor`` and ``max_concurrency`` through :meth:`tool_runner_settings` when
    a batch of calls runs.
    """

    KIND: ClassVar[str] = "client_tool"
    PARAMS: ClassVar[dict[str, tuple[Any, str]]] = {
        "restore_from_history": (True, "activate deferred tools the visible history already used"),
        "gate_reachability": (True, "expose a family's guide tools while some tool of the family is hidden"),
        "executor": ("sequential", "'sequential', 'parallel' (≤ max_concurrency threads) or 'partition'"),
        "max_concurrency": (10, "threads of the parallel executors"),
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cache: tuple[int, bool, list[ToolDef]] | None = None

    def exposed_tools(self, rt: TurnRuntime) -> list[ToolDef]:
        """Definitions to offer this iteration, in registry order (cached per registry version)."""
        restore = self.param_bool("restore_from_history")
        gate = self.param_bool("gate_reachability")
        if restore:
            for msg in rt.messages:
                for use in tool_uses(msg):
                    rt.tools.activate(str(use.get("name", "")))
        if self._cache is not None and self._cache[0] == rt.tools.version and self._cache[1] == gate:
            return list(self._cache[2])
        tools = list(rt.tools)
        exposed = {t.name for t in tools if rt.tools.is_activated(t.name)}
        if gate:
            hidden_families = {t.family for t in tools if t.family and t.name not in exposed}
            exposed |= {t.name for t in tools if t.guide and t.family in hidden_families}
        out = [t for t in tools if t.name in exposed]
        self._cache = (rt.tools.version, gate, out)
        return list(out)

    def tool_runner_settings(self) -> tuple[str, int]:
        """``(executor, max_concurrency)``; an unknown executor is ``sequential``."""
        executor = self.param_str("executor")
        if executor not in EXECUTORS:
            executor = "sequential"
        concurrency = max(1, self.param_int("max_concurrency")) if executor != "sequential" else 1
        return executor, concurrency
