"""The turn runtime: the mutable state of one turn that stages and components share (SPEC §7.1).

A :class:`TurnRuntime` is created per turn and handed to every component hook as ``rt``. What a
component may use: ``plan``, ``config``, ``messages`` (copy-on-write, see
:mod:`rsi_common.kernel.messages`), ``turn_start``, ``system``, ``turn_context``, ``tools``,
``request_tools``, ``iteration``, ``clock``, ``memory``, ``memory_chunks``, ``components``,
``kwarg()``, ``emit()``, ``estimate_tokens()``, ``call_model()``, ``add_note()``, ``is_replay``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rsi_common.errors import InvalidInput
from rsi_common.kernel.ledger import Ledger, ModelCaller, Purpose
from rsi_common.kernel.messages import TokenEstimator, add_note
from rsi_common.kernel.registry import ToolRegistry
from rsi_common.kernel.types import MODEL_DEFAULTS, MemoryProvider, TurnPlan
from rsi_common.world import text_of

if TYPE_CHECKING:
    from rsi_common.kernel.capture import WorldCapture
    from rsi_common.kernel.components.base import Component
    from rsi_common.llm import ModelRequest, ModelResponse

__all__ = ["ModelConfig", "TurnRuntime"]


def _int_or_none(name: str, value: Any, *, minimum: int = 0) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise InvalidInput(f"kwarg {name} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise InvalidInput(f"kwarg {name} must be ≥ {minimum}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class ModelConfig:
    """The turn's resolved model config and kernel limits (SPEC §7.1, §7.3).

    Values come from host kwargs over :data:`~rsi_common.kernel.types.MODEL_DEFAULTS`; no
    component can change them.
    """

    max_tokens: int
    temperature: float | None
    thinking_level: str | None
    enable_compaction: bool
    context_window_budget: int
    max_iterations: int
    max_turn_tokens: int | None
    output_schema: dict[str, Any] | None

    @classmethod
    def from_plan(cls, plan: TurnPlan) -> ModelConfig:
        """Resolve host kwargs over the defaults.

        Raises:
            InvalidInput: a kwarg has the wrong type or range.
        """
        kw = {**MODEL_DEFAULTS, **{k: v for k, v in plan.kwargs.items() if v is not None}}
        temperature = kw.get("temperature")
        if temperature is not None and (isinstance(temperature, bool)
                                        or not isinstance(temperature, int | float)):
            raise InvalidInput(f"kwarg temperature must be a number, got {temperature!r}")
        schema = plan.output_schema if plan.output_schema is not None else kw.get("output_schema")
        if schema is not None and not isinstance(schema, Mapping):
            raise InvalidInput("output_schema must be a JSON object")
        level = kw.get("thinking_level")
        return cls(
            max_tokens=_int_or_none("max_tokens", kw["max_tokens"], minimum=1) or 1,
            temperature=None if temperature is None else float(temperature),
            thinking_level=None if level is None else str(level),
            enable_compaction=bool(kw["enable_compaction"]),
            context_window_budget=_int_or_none("context_window_budget", kw["context_window_budget"]) or 0,
            max_iterations=_int_or_none("max_iterations", kw["max_iterations"], minimum=1) or 1,
            max_turn_tokens=_int_or_none("max_turn_tokens", kw.get("max_turn_tokens")),
            output_schema=None if schema is None else dict(schema),
        )


@dataclass
class TurnRuntime:
    """Mutable state of one turn (see the module docstring for what components may use)."""

    plan: TurnPlan
    config: ModelConfig
    caller: ModelCaller
    tools: ToolRegistry
    components: list[Component]
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
        """The turn's ledger (SPEC §7.4)."""
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
        """Replay is detected by the memory provider's ``rsi_replay`` attribute only (SPEC §4.2)."""
        return bool(getattr(self.plan.memory, "rsi_replay", False))

    def kwarg(self, name: str) -> Any:
        """The host kwarg ``name`` (None when absent: not set)."""
        return self.plan.kwargs.get(name)

    def emit(self, kind: str, **data: Any) -> None:
        """Record a content-free kernel event."""
        self.events.append({"type": kind, "iteration": self.iteration, **data})

    def fire(self, component: Component) -> None:
        """Note that a hook of ``component`` ran (trajectory ``components_fired``)."""
        if component.id not in self.fired:
            self.fired.append(component.id)

    def components_of(self, kind: str) -> list[Component]:
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
