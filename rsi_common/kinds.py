"""The component vocabulary 𝒦 (docs/algorithm/formulas.md §1.1), shared by the formulas, the harness and the
kernel."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["KINDS", "K_ENABLED_PRODUCTION", "K_STR", "REQUIRED_KINDS", "in_kind_order"]

KINDS: tuple[str, ...] = (
    "prompt",
    "control_flow",
    "config",
    "output_plumbing",
    "context_mgmt",
    "client_tool",
    "skill",
    "memory",
    "subagent",
)
"""𝒦, always handled in this order (RRSI Eq.12)."""

K_STR: tuple[str, ...] = ("client_tool", "skill", "memory", "subagent")
"""Structural kinds: the only ones that earn novelty ν (RRSI Eq.15)."""

K_ENABLED_PRODUCTION: tuple[str, ...] = tuple(k for k in KINDS if k != "subagent")
"""Kinds enabled in production; ``subagent`` has no registered implementation yet."""

REQUIRED_KINDS: tuple[str, ...] = ("prompt", "context_mgmt", "control_flow", "output_plumbing")
"""Each needs at least one enabled component in every harness (docs/formats.md §5.1)."""


def in_kind_order(kinds: Iterable[str]) -> tuple[str, ...]:
    """The distinct members of ``kinds`` that are in 𝒦, in 𝒦 order."""
    wanted = set(kinds)
    return tuple(k for k in KINDS if k in wanted)
