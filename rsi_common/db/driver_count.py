"""A write statement as driver SQL with its row count (docs/performance/consolidation.md#the-no-signal-path).

``Connection.exec_driver_sql`` builds an execution context and a ``CursorResult`` (~50 µs of Python on
SQLite) where a fenced write needs only how many rows it changed. :func:`run_count` runs the statement
on the connection's DB-API cursor as :func:`~rsi_common.db.lean_tx.execute_on_cursor` does — the
engine's ``before_cursor_execute`` / ``after_cursor_execute`` events fire (statement counters, a
listener's rewrite), a driver error is raised as ``Connection.execute`` raises it — and returns the
cursor's ``rowcount``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from rsi_common.db.lean_tx import LeanConnection, on_cursor

__all__ = ["run_count"]


def run_count(conn: Connection, statement: str, params: Sequence[Any] | Mapping[str, Any]) -> int:
    """Run the write ``statement`` with ``params`` (the driver's parameter style) inside ``conn``'s
    transaction (a ``Connection`` not in one begins it, as its autobegin would); returns the rows it
    changed (the cursor's ``rowcount``).

    Raises:
        sqlalchemy.exc.DBAPIError: the driver's error, as ``Connection.execute`` raises it.
        sqlalchemy.exc.StatementError: the driver could not adapt a value.
    """
    if not isinstance(conn, LeanConnection) and not conn.in_transaction():
        conn.begin()
    return on_cursor(conn, statement, params, _row_count)


def _row_count(cursor: Any) -> int:
    return int(cursor.rowcount)
