"""Daily caps per tree and per agent (docs/runtime/accounting.md#caps).

The caps of a tree are the ``RSI_RUNTIME__*_PER_DAY`` settings, overridden field by field by the
root's ``rsi_agent_runtime.caps``. A cap of 0 (or ``None`` for USD) means no cap. A dimension is
reached when the day's total plus what is being added would pass it; ``first_exceeded`` names the
first such dimension in the fixed order of :data:`DIMS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from rsi_common.config import RuntimeParams
from rsi_common.errors import InvalidInput

__all__ = ["CAP_FIELDS", "DIMS", "Caps", "DayTotals", "first_exceeded", "resolve_caps"]

DIMS: tuple[str, ...] = ("tokens", "agent_tokens", "usd", "turns", "spawns", "messages")
"""Cap dimensions in the order they are checked; ``cap_exceeded:<dim>`` names one."""
CAP_FIELDS: Mapping[str, str] = {
    "tree_tokens_per_day": "tokens", "agent_tokens_per_day": "agent_tokens", "tree_usd_per_day": "usd",
    "tree_turns_per_day": "turns", "tree_spawns_per_day": "spawns", "tree_messages_per_day": "messages",
}
"""Setting (and override key) → dimension."""


@dataclass(frozen=True)
class DayTotals:
    """What a tree (or one agent: ``agent_tokens``) spent on one UTC day."""

    tokens: int = 0
    agent_tokens: int = 0
    usd: float = 0.0
    turns: int = 0
    spawns: int = 0
    messages: int = 0

    def plus(self, other: DayTotals) -> DayTotals:
        """The field-wise sum."""
        return DayTotals(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Caps:
    """The day's limits of one tree; ``None`` = no cap."""

    tokens: int | None
    agent_tokens: int | None
    usd: float | None
    turns: int | None
    spawns: int | None
    messages: int | None


def _cap(value: Any, name: str) -> Any:
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < 0:
        raise InvalidInput(f"caps.{name} must be a finite number >= 0 or null")
    if name != "tree_usd_per_day" and value != int(value):
        raise InvalidInput(f"caps.{name} must be a whole number")
    return value


def resolve_caps(params: RuntimeParams, override: Mapping[str, Any] | None = None) -> Caps:
    """The caps of a tree: the settings, then the root's override.

    Raises:
        InvalidInput: an override key that names no cap, or a value that is not a number >= 0
            (the message names the key, never the value).
    """
    values: dict[str, Any] = {}
    for key, dim in CAP_FIELDS.items():
        v = getattr(params, key)
        values[dim] = None if v is None or (v == 0 and key != "tree_usd_per_day") else v
    for key, value in (override or {}).items():
        if key not in CAP_FIELDS:
            raise InvalidInput(f"caps: unknown key {key[:64]!r}; expected one of {', '.join(CAP_FIELDS)}")
        v = _cap(value, key)
        dim = CAP_FIELDS[key]
        values[dim] = None if v is None or (v == 0 and key != "tree_usd_per_day") else v
    return replace(Caps(None, None, None, None, None, None), **values)


def first_exceeded(caps: Caps, spent: DayTotals, add: DayTotals) -> str | None:
    """The first dimension of :data:`DIMS` whose cap ``spent + add`` passes, or ``None``.

    A dimension ``add`` does not raise is checked as "already at or past the cap" only when it is
    a token or USD dimension (a spent budget refuses every new action)."""
    after = spent.plus(add)
    for dim in DIMS:
        cap = getattr(caps, dim)
        if cap is None:
            continue
        delta = getattr(add, dim)
        if delta > 0 and getattr(after, dim) > cap:
            return dim
        if delta == 0 and dim in ("tokens", "agent_tokens", "usd") and getattr(spent, dim) >= cap:
            return dim
    return None
