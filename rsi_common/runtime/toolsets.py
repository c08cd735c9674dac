"""Toolsets: what ``profile.toolset`` names beyond the tools (docs/runtime/refine.md#privilege-screen).

Built in, one entry per toolset: the terms no refinement may add (PV3, case-insensitive, whole word).
The sim toolset forbids the admin and console channels its exploit scenarios use (decision D31).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["FORBIDDEN_TERMS", "forbidden_terms"]

FORBIDDEN_TERMS: Mapping[str, tuple[str, ...]] = {
    "sim": ("rcon", "admin_console"),
}
"""Toolset → its ``forbidden_terms``."""


def forbidden_terms(toolset: str) -> tuple[str, ...]:
    """The toolset's forbidden terms (``()`` for a toolset without any)."""
    return FORBIDDEN_TERMS.get(toolset, ())
