"""Core statements compiled once per dialect and run as driver SQL (docs/performance/record-path.md,
"SQLAlchemy's share").

``Connection.execute(construct)`` looks the statement up in the compile cache, builds the parameter
dict, runs the bind processors and sets up a typed result on every call: ~160 µs of Python per
statement on SQLite. :class:`PlainStatement` does the lookup and the ordering once: it keeps the
compiled SQL text and, per slot, the parameter key (or the constant the construct bound) and the
bind processor of its type — the same processors ``execute`` would run (JSON serialiser,
``Boolean``, ``Double``). :meth:`PlainStatement.run` then orders the values (a tuple for SQLite's
``?``, a dict for psycopg's ``%(name)s``; PostgreSQL's casts are in the SQL text) and runs them on
the connection's DB-API cursor with :func:`~rsi_common.db.lean_tx.run_driver_sql`, which fires the
engine's cursor events (the statement counter) and raises the errors ``execute`` raises — only the
compile-cache lookup, the execution context and the typed result are skipped, so rows come back as
the driver returns them (SQLite: ``0``/``1`` for a boolean; callers convert).

:func:`plain` returns ``None`` for a statement that binds a value only known at execution (a
Python-side column default, a callable, an expanding ``IN``): the caller runs the Core construct.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection, CursorResult, Dialect
from sqlalchemy.exc import StatementError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement

from rsi_common.db.lean_tx import run_driver_sql

__all__ = ["PlainStatement", "plain"]

_NO_KEY = ""


@dataclass(frozen=True)
class PlainStatement:
    """A compiled statement with positional slots: ``(key, constant, processor)`` each; ``key`` is
    the parameter name, or ``""`` for a constant the construct bound (already processed)."""

    sql: str
    slots: tuple[tuple[str, Any, Callable[[Any], Any] | None], ...]
    names: tuple[str, ...] | None = None
    """The placeholder of each slot for a named parameter style (psycopg's ``%(name)s``);
    ``None``: positional (SQLite's ``?``)."""

    def bind(self, params: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        """The driver parameters for ``params`` (every key of the statement; a missing one raises
        ``KeyError``): a tuple for a positional style, a dict for a named one.

        Raises:
            sqlalchemy.exc.StatementError: a bind processor refused a value (e.g. not JSON), with
                the original exception as ``orig`` — as ``Connection.execute`` raises it.
        """
        values = []
        try:
            for key, constant, process in self.slots:
                if not key:
                    values.append(constant)
                    continue
                value = params[key]
                values.append(value if process is None else process(value))
        except KeyError:
            raise
        except Exception as exc:  # as Core reports a value its bind processor refuses
            raise StatementError(str(exc), self.sql, dict(params), exc) from exc
        if self.names is None:
            return tuple(values)
        return dict(zip(self.names, values, strict=True))

    def run(self, conn: Connection, params: Mapping[str, Any]) -> list[Any]:
        """Execute with ``params`` (:meth:`bind`) on ``conn``'s DB-API cursor
        (:func:`~rsi_common.db.lean_tx.run_driver_sql`: the engine's cursor events fire); returns
        the rows as the driver returns them (tuples).

        Raises:
            sqlalchemy.exc.StatementError: as :meth:`bind`.
            sqlalchemy.exc.DBAPIError: the driver's error, as ``Connection.execute`` raises it.
        """
        return run_driver_sql(conn, self.sql, self.bind(params))

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> CursorResult[Any]:
        """As :meth:`run`, through ``Connection.exec_driver_sql``: a result with ``rowcount`` and
        SQLAlchemy's row methods, for callers that need them."""
        return conn.exec_driver_sql(self.sql, self.bind(params))


def plain(statement: ClauseElement, dialect: Dialect) -> PlainStatement | None:
    """``statement`` compiled for ``dialect`` as a :class:`PlainStatement`, or ``None`` when a
    bound value is only known at execution (a Python-side default, a callable, an expanding or
    literal-execute parameter)."""
    compiled = statement.compile(dialect=dialect)
    if not isinstance(compiled, SQLCompiler) or compiled.insert_prefetch or compiled.literal_execute_params \
            or compiled.post_compile_params:
        return None
    if compiled.positional:
        if compiled.positiontup is None:
            return None
        order = [(compiled.binds[name], name) for name in compiled.positiontup]
    else:
        escaped: Mapping[str, str] = compiled.escaped_bind_names or {}
        order = [(bind, escaped.get(name, name)) for bind, name in compiled.bind_names.items()]
    slots: list[tuple[str, Any, Callable[[Any], Any] | None]] = []
    for bind, _ in order:
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if bind.required:
            slots.append((bind.key, None, process))
            continue
        if bind.callable is not None or bind.value is None:
            return None
        slots.append((_NO_KEY, bind.value if process is None else process(bind.value), None))
    names = None if compiled.positional else tuple(name for _, name in order)
    return PlainStatement(str(compiled), tuple(slots), names)
