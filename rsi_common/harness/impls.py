"""The registered component implementations and the protocol each kind must offer (SPEC §5.1, §5.5)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

__all__ = ["KNOWN_IMPLS", "PROTOCOL_METHODS"]

_P = "rsi_common.kernel.components."

KNOWN_IMPLS: Final[dict[str, str]] = {
    _P + "prompt:SystemPromptComponent": "prompt",
    _P + "context:StandardContextComponent": "context_mgmt",
    _P + "control:StandardControlComponent": "control_flow",
    _P + "output:ParseOutputComponent": "output_plumbing",
    _P + "tools:ToolExposureComponent": "client_tool",
    _P + "memory:ArchiveMemoryComponent": "memory",
    _P + "config:PromptCacheComponent": "config",
    _P + "skills:SkillLibraryComponent": "skill",
}
"""impl string → kind: the seven impls of H0 plus the skill library (no ``subagent`` impl exists).
``rsi_common.kernel.components.REGISTRY`` must have exactly these keys."""

PROTOCOL_METHODS: Final[MappingProxyType[str, tuple[str, ...]]] = MappingProxyType(
    {
        "prompt": ("build",),
        "context_mgmt": ("before_call", "ensure_fits"),
        "control_flow": ("decide",),
        "output_plumbing": ("parse", "settle"),
        "client_tool": ("exposed_tools",),
        "memory": ("retriever", "on_slice_end"),
        "config": ("apply_request",),
        "skill": (),
        "subagent": (),
    }
)
"""kind → methods a component class of that kind must define (checked by ``instantiate``)."""
