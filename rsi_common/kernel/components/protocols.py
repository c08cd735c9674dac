"""The hook protocol of each component kind (docs/formats.md §5.1): the methods the kernel calls on it.

:data:`KIND_HOOKS` names the protocol of every kind of 𝒦; the component registry
(:mod:`~rsi_common.kernel.components.registry`) derives from these classes the methods a registered
class must define, and ``instantiate`` checks them. A kind the kernel calls no hook on (``skill``,
whose library contributes tools and prompt blocks through :class:`~.base.Component`'s optional
hooks; ``subagent``, not implemented yet) has an empty protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rsi_common.kernel.runtime import TurnRuntime
    from rsi_common.kernel.types import Decision, ParsedStep, ToolDef
    from rsi_common.llm import ModelRequest, ModelResponse

__all__ = [
    "KIND_HOOKS",
    "ConfigHooks",
    "ContextHooks",
    "ControlHooks",
    "MemoryHooks",
    "OutputHooks",
    "PromptHooks",
    "Retriever",
    "SkillHooks",
    "SubagentHooks",
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


class SkillHooks(Protocol):
    """No hook of its own: a skill library contributes ``tools`` and ``prompt_blocks``."""


class SubagentHooks(Protocol):
    """No implementation exists yet (𝒦 reserves the kind)."""


KIND_HOOKS: Mapping[str, type] = MappingProxyType({
    "prompt": PromptHooks,
    "control_flow": ControlHooks,
    "config": ConfigHooks,
    "output_plumbing": OutputHooks,
    "context_mgmt": ContextHooks,
    "client_tool": ToolHooks,
    "skill": SkillHooks,
    "memory": MemoryHooks,
    "subagent": SubagentHooks,
})
"""Kind → its hook protocol, for every kind of 𝒦 (:data:`~rsi_common.kinds.KINDS`), in 𝒦 order."""
