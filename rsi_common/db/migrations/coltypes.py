"""Column types shared by the migration scripts (docs/protocol.md#migrations).

Frozen: a migration replays the schema of its day, so these definitions never change; a new type is
a new function.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["big_id", "json_type", "ts_type"]


def json_type() -> sa.JSON:
    """JSON whose Python ``None`` is SQL NULL."""
    return sa.JSON(none_as_null=True)


def ts_type() -> sa.DateTime:
    """A timezone-aware timestamp."""
    return sa.DateTime(timezone=True)


def big_id() -> sa.types.TypeEngine[int]:
    """A 64-bit integer key (``INTEGER`` on SQLite, so it is the rowid alias)."""
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")
