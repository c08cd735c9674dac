"""The turn runtime: the mutable state of one turn that stages and components share (docs/formats.md §7.1).

A :class:`TurnRuntime` is created per turn and handed to every component hook as ``rt``. What a
component may use: ``plan``, ``config``, ``messages`` (copy-on-write, see
:mod:`rsi_common.kernel.messages`), ``turn_start``, ``system``, ``turn_context``, ``tools``,
``request_tools``, ``iteration``, ``clock``, ``memory``, ``memory_chunks``, ``components``,
``kwarg()``, ``emit()``, ``estimate_tokens()``, ``call_model()``, ``add_note()``, ``is_replay``.

Components take the runtime, so they stand above it: the runtime knows a component only as a
:class:`TurnComponent`, which :class:`~rsi_common.kernel.components.base.Component` satisfies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from rsi_common.kernel.ledger import Ledger, ModelCaller, Purpose
from rsi_common.kernel.messages import TokenEstimator, add_note
from rsi_common.kernel.tool_registry import ToolRegistry
from rsi_common.kernel.types import MemoryProvider, ModelConfig, TurnPlan
from rsi_common.world import text_of

if TYPE_CHECKING:
    from rsi_common.kernel.capture import WorldCapture
    from rsi_common.llm import ModelRequest, ModelResponse

__all__ = ["TurnComponent", "TurnRuntime"]


class TurnComponent(Protocol):
    """What the runtime, and a component looking at its peers through it, use of a component."""

    KIND: ClassVar[str]

    @property
    def id(self) -> str:
        """The component id from the manifest."""
        ...

    def prompt_blocks(self, rt: TurnRuntime) -> list[tuple[str, str]]:
        """Prompt parts this component contributes."""
        ...

    def params_read(self) -> set[str]:
        """Addresses ``<id>.params.<key>`` of every param read so far."""
        ...


@dataclass
class TurnRuntime:
    """Mutable state of one turn (see the module docstring for what components may use)."""

    plan: TurnPlan
    config: ModelConfig
    caller: ModelCaller
    tools: ToolRegistry
    components: Sequence[TurnComponent]
    harness_version: str = ""
    harness_name: str = ""
    seed: int | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    turn_start: int = 0
    """Index of this turn's input message in ``messages`` (history before it)."""
    system: str = ""
    turn_context: str = ""
    request_tools: list[dict[str, Any]] = field(default_factory=list)
    iteration: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    memory_chunks: list[dict[str, Any]] | None = None
    tools_exposed: bool = False
    """Some tool was exposed to the model this turn (completion review condition)."""
    has_tool_runner: bool = False
    last_tool_error: bool = False
    """The turn's last tool result was an error."""
    tool_calls_run: int = 0
    tool_errors: int = 0
    pending: dict[str, Any] | None = None
    """Set when a tool batch yielded (``TurnResult.pending``)."""
    step_call_sets: list[list[str]] = field(default_factory=list)
    """Per main step, the sorted canonical ``(name, input)`` strings of its tool calls (repeat-stop)."""
    review_done: bool = False
    soft_budget_noted: bool = False
    compacted: bool = False
    final_text: str = ""
    fired: list[str] = field(default_factory=list)
    capture: WorldCapture | None = None
    estimator: TokenEstimator = field(default_factory=TokenEstimator)

    @property
    def ledger(self) -> Ledger:
        """The turn's ledger (docs/formats.md §7.4)."""
        return self.caller.ledger

    @property
    def clock(self) -> float:
        """The turn clock, epoch seconds (the world's clock in replays)."""
        return float(self.plan.clock)

    @property
    def memory(self) -> MemoryProvider | None:
        """The host memory provider (or the replay provider), or None."""
        return self.plan.memory

    @property
    def is_replay(self) -> bool:
        """Replay is detected by the memory provider's ``rsi_replay`` attribute only
        (docs/formats.md §4.2)."""
        return bool(getattr(self.plan.memory, "rsi_replay", False))

    def kwarg(self, name: str) -> Any:
        """The host kwarg ``name`` (None when absent: not set)."""
        return self.plan.kwargs.get(name)

    def emit(self, kind: str, **data: Any) -> None:
        """Record a content-free kernel event."""
        self.events.append({"type": kind, "iteration": self.iteration, **data})

    def fire(self, component: TurnComponent) -> None:
        """Note that a hook of ``component`` ran (trajectory ``components_fired``)."""
        if component.id not in self.fired:
            self.fired.append(component.id)

    def components_of(self, kind: str) -> list[TurnComponent]:
        """Enabled components of ``kind``, in manifest order."""
        return [c for c in self.components if kind == c.KIND]

    def estimate_tokens(self, *, with_context: bool = False) -> int:
        """Token estimate of ``{system, messages, tools}`` (+ the turn context when asked)."""
        extra = len(self.turn_context) + 40 if with_context and self.turn_context else 0
        return self.estimator.tokens(self.system, self.messages, self.request_tools, extra)

    def call_model(self, request: ModelRequest, purpose: Purpose = "main") -> ModelResponse:
        """Call the policy model through the ledger (retries, cancel check, cost budget)."""
        return self.caller.call(request, purpose)

    def main_input_tokens(self) -> int:
        """Σ input tokens of this turn's main calls."""
        return self.ledger.main_input_tokens()

    def add_note(self, text: str) -> None:
        """Append a kernel note to the stored history as user text."""
        add_note(self.messages, text)

    def request_text(self) -> str:
        """The turn's request text (the memory query): ``text_of(input).strip()``."""
        return text_of(self.plan.input).strip()
