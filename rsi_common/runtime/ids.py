"""Ids of the runtime's rows: a prefix and 24 lowercase hex characters (docs/runtime/README.md#tables)."""

from __future__ import annotations

import secrets

__all__ = ["RESERVED_IDS", "new_id"]

RESERVED_IDS: frozenset[str] = frozenset({"run", "tree", "sa"})
"""Agent ids the runtime refuses: they would collide with its Redis key prefixes."""


def new_id(prefix: str) -> str:
    """``<prefix>_`` + 24 hex characters (``sa``, ``m``, ``g``, ``hb``, ``au``)."""
    return f"{prefix}_{secrets.token_hex(12)}"
