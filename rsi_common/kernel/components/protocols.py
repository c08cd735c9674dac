"""The hook protocol of each component kind (SPEC §5.1 ``instantiate`` checks these methods exist)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rsi_common.kernel.runtime import TurnRuntime
    from rsi_common.kernel.types import Decision, ParsedStep, ToolDef
    from rsi_common.llm import ModelRequest, ModelResponse

__all__ = [
    "ConfigHooks",
    "ContextHooks",
    "ControlHooks",
    "MemoryHooks",
    "OutputHooks",
    "PromptHooks",
    "Retriever",
    "ToolHooks",
]

Retriever = Callable[[str, float], list[dict[str, Any]]]
"""``(query, timeout_s) -> chunks``."""


class PromptHooks(Protocol):
    def build(self, rt: TurnRuntime) -> tuple[str, str]: ...


class ContextHooks(Protocol):
    def before_call(self, rt: TurnRuntime) -> None: ...

    def ensure_fits(self, rt: TurnRuntime) -> bool: ...


class ControlHooks(Protocol):
    def decide(self, rt: TurnRuntime, step: ParsedStep, tools_ran: bool) -> Decision: ...


class OutputHooks(Protocol):
    def parse(self, rt: TurnRuntime, response: ModelResponse) -> ParsedStep: ...

    def settle(self, text: str, schema: dict[str, Any] | None) -> str: ...


class ToolHooks(Protocol):
    def exposed_tools(self, rt: TurnRuntime) -> list[ToolDef]: ...

    def tool_runner_settings(self) -> tuple[str, int]: ...


class MemoryHooks(Protocol):
    def retriever(self, rt: TurnRuntime) -> Retriever | None: ...

    def on_slice_end(self, rt: TurnRuntime) -> None: ...


class ConfigHooks(Protocol):
    def apply_request(self, rt: TurnRuntime, request: ModelRequest) -> ModelRequest: ...
