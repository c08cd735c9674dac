"""Core statements compiled once per dialect and run as driver SQL (docs/performance/record-path.md,
"SQLAlchemy's share").

``Connection.execute(construct)`` looks the statement up in the compile cache, builds the parameter
dict, runs the bind processors and sets up a typed result on every call: ~160 µs of Python per
statement on SQLite. :class:`PlainStatement` does the lookup and the ordering once: it keeps the
compiled SQL text and, per positional slot, the parameter key (or the constant the construct
bound) and the bind processor of its type — the same processors ``execute`` would run (JSON
serialiser, ``Boolean``, ``Double``). :meth:`PlainStatement.run` then orders the values and calls
``Connection.exec_driver_sql``, which still fires the engine's events (``before_cursor_execute``:
the statement counter, the SQLite writer queue's commit hook) — only the compile-cache lookup and the
typed result are skipped, so rows come back as the driver returns them (SQLite: ``0``/``1`` for a
boolean; callers convert).

Only dialects with a positional parameter style (SQLite's ``qmark``) are compiled this way;
:func:`plain` returns ``None`` for the others (PostgreSQL's psycopg uses named parameters and
server-side casts), and for a statement that binds a value only known at execution (a Python-side
column default, a callable): the caller runs the Core construct then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection, CursorResult, Dialect
from sqlalchemy.exc import StatementError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement

__all__ = ["PlainStatement", "plain"]

_NO_KEY = ""


@dataclass(frozen=True)
class PlainStatement:
    """A compiled statement with positional slots: ``(key, constant, processor)`` each; ``key`` is
    the parameter name, or ``""`` for a constant the construct bound (already processed)."""

    sql: str
    slots: tuple[tuple[str, Any, Callable[[Any], Any] | None], ...]

    def run(self, conn: Connection, params: Mapping[str, Any]) -> CursorResult[Any]:
        """Execute with ``params`` (every key of the statement; a missing one raises ``KeyError``).

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
        return conn.exec_driver_sql(self.sql, tuple(values))


def plain(statement: ClauseElement, dialect: Dialect) -> PlainStatement | None:
    """``statement`` compiled for ``dialect`` as a :class:`PlainStatement`, or ``None`` when the
    dialect's parameters are not positional or a bound value is only known at execution."""
    compiled = statement.compile(dialect=dialect)
    if not isinstance(compiled, SQLCompiler):
        return None
    order = compiled.positiontup
    if not compiled.positional or order is None or compiled.insert_prefetch:
        return None
    slots: list[tuple[str, Any, Callable[[Any], Any] | None]] = []
    for name in order:
        bind = compiled.binds[name]
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if bind.required:
            slots.append((bind.key, None, process))
            continue
        if bind.callable is not None or bind.value is None:
            return None
        slots.append((_NO_KEY, bind.value if process is None else process(bind.value), None))
    return PlainStatement(str(compiled), tuple(slots))
