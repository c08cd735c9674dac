"""Portable column types and database-clock expressions shared by the models and the repository.

* :data:`JSONType` — ``JSON`` on every backend (PostgreSQL's ``json``, not ``jsonb``; see below);
  SQL ``NULL`` for Python ``None``.
* :class:`UTCDateTime` — ``TIMESTAMP WITH TIME ZONE``; always returns timezone-aware UTC datetimes,
  also on SQLite (which stores naive UTC text).
* :func:`db_now` / :func:`db_ago` — "now" **by the database clock**, never Python's: every
  timestamp column is filled with :func:`db_now` and every age comparison uses :func:`db_ago`, so
  hosts and workers with skewed clocks agree. On SQLite the clock is rendered with millisecond
  resolution (``strftime('%Y-%m-%d %H:%M:%f', 'now')``, UTC) instead of ``CURRENT_TIMESTAMP``'s
  whole seconds; on PostgreSQL it is ``CURRENT_TIMESTAMP`` (the transaction's start time).

Why not ``JSONB`` (project decision): ``jsonb`` re-orders object keys (shortest first) and drops
duplicates. Several stored documents depend on key order: the consolidation state prunes its replay
cache and verdict cache by *insertion order* (docs/algorithm/consolidation.md §3.6.5), worlds carry tool
schemas and tool inputs
whose key order is part of the byte-identical replayed request (docs/architecture.md invariant 6), and
payloads carry manifests. PostgreSQL's ``json`` stores the text as given, so a document reads back
exactly as written on both backends. Nothing queries inside these columns, so ``jsonb``'s indexing
buys nothing here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

__all__ = ["BigIntId", "JSONType", "UTCDateTime", "db_ago", "db_now"]

JSONType = sa.JSON(none_as_null=True)
"""JSON column (``json`` on PostgreSQL, text on SQLite): key order preserved; ``None`` is SQL ``NULL``."""

BigIntId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""Surrogate auto-increment key: ``BIGINT`` on PostgreSQL, ``INTEGER`` (rowid alias) on SQLite."""

_SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


class UTCDateTime(sa.TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that reads back timezone-aware UTC datetimes on every backend.

    Binding a naive datetime raises ``ValueError`` (the repository never binds "now" from Python;
    see :func:`db_now`).
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: pass a timezone-aware value")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # a raw SQLite expression result
            value = datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class db_now(FunctionElement[datetime]):
    """The database clock's current time (see the module docstring)."""

    type = UTCDateTime()
    inherit_cache = True
    name = "db_now"


class _db_ago(FunctionElement[datetime]):
    type = UTCDateTime()
    inherit_cache = True
    name = "db_ago"


def db_ago(seconds: float) -> FunctionElement[datetime]:
    """The database clock's current time minus ``seconds``.

    Args:
        seconds: age in seconds (finite, ≥ 0).

    Raises:
        ValueError: ``seconds`` is negative or not finite.
    """
    s = float(seconds)
    if not (s >= 0 and s != float("inf")):
        raise ValueError(f"seconds must be finite and >= 0, got {seconds!r}")
    return _db_ago(sa.literal(s, sa.Double()))


@compiles(db_now)
def _now_default(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


@compiles(db_now, "sqlite")
def _now_sqlite(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return _SQLITE_NOW


@compiles(_db_ago)
def _ago_default(element: _db_ago, compiler: SQLCompiler, **kw: Any) -> str:
    (arg,) = element.clauses
    return f"(CURRENT_TIMESTAMP - make_interval(secs => {compiler.process(arg, **kw)}))"


@compiles(_db_ago, "sqlite")
def _ago_sqlite(element: _db_ago, compiler: SQLCompiler, **kw: Any) -> str:
    (arg,) = element.clauses
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || {compiler.process(arg, **kw)} || ' seconds')"
