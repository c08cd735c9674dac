"""Toolsets: the non-runtime tools a registered agent may be granted
(docs/runtime/failures.md#at-most-once-tools).

A profile names one toolset (``AgentProfile.toolset``, ``sim`` built in and empty) and grants part of
it (``AgentProfile.tools``). A :class:`Toolset` holds the tools (with their executors), its
``forbidden_terms`` (the privilege screen's PV3) and the names of its ``at_most_once`` tools, which
are journaled before they run (:mod:`rsi_common.runtime.effects`). Toolsets are registered in the
process (:func:`register_toolset`); a worker registers its own before serving queue ``agents``.
The built-in ``sim`` toolset has no tools and forbids the admin and console channels its exploit
scenarios use (docs/runtime/refine.md#privilege-screen, decision D31).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rsi_common.errors import InvalidInput
from rsi_common.kernel.types import ToolDef
from rsi_common.runtime import effects

__all__ = ["Toolset", "forbidden_terms", "get_toolset", "register_toolset", "toolset_tools"]


@dataclass(frozen=True)
class Toolset:
    """Tools, the terms refinements may not add, and the tools whose effect must happen at most once."""

    tools: tuple[ToolDef, ...] = ()
    forbidden_terms: tuple[str, ...] = ()
    at_most_once: frozenset[str] = frozenset()


_LOCK = threading.Lock()
_TOOLSETS: dict[str, Toolset] = {"sim": Toolset(forbidden_terms=("rcon", "admin_console"))}


def register_toolset(name: str, toolset: Toolset) -> None:
    """Register (or replace) toolset ``name`` in this process.

    Raises:
        InvalidInput: an empty name, or ``at_most_once`` naming a tool the toolset does not have.
    """
    if not isinstance(name, str) or not name:
        raise InvalidInput("toolset name must be a non-empty string")
    unknown = set(toolset.at_most_once) - {t.name for t in toolset.tools}
    if unknown:
        raise InvalidInput(f"at_most_once names tools the toolset lacks: {', '.join(sorted(unknown))}")
    with _LOCK:
        _TOOLSETS[name] = toolset


def get_toolset(name: str) -> Toolset:
    """Toolset ``name``; an unknown name is the empty toolset (its agents get runtime tools only)."""
    with _LOCK:
        return _TOOLSETS.get(name, Toolset())


def forbidden_terms(toolset: str) -> tuple[str, ...]:
    """The terms no refinement may add under ``toolset`` (PV3; ``()`` for an unknown toolset)."""
    return get_toolset(toolset).forbidden_terms


def toolset_tools(grant: tuple[str, ...]) -> list[ToolDef]:
    """The granted tools of the running attempt's toolset, ``at_most_once`` ones journaled (empty
    outside a turn)."""
    attempt = effects.current()
    if attempt is None:
        return []
    ts = get_toolset(attempt.toolset)
    granted = set(grant)
    return [effects.journaled(t, attempt) if t.name in ts.at_most_once else t
            for t in ts.tools if t.name in granted]
