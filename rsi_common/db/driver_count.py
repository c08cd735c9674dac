"""A write statement as driver SQL with its row count (docs/performance/consolidation.md#the-no-signal-path).

``Connection.exec_driver_sql`` builds an execution context and a ``CursorResult`` (~50 µs of Python on
SQLite) where a fenced write needs only how many rows it changed. :func:`run_count` runs the statement
on the connection's DB-API cursor as :func:`~rsi_common.db.lean_tx.execute_on_cursor` does — the
engine's ``before_cursor_execute`` / ``after_cursor_execute`` events fire (statement counters, a
listener's rewrite), a driver error is raised as ``Connection.execute`` raises it — and returns the
cursor's ``rowcount``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from rsi_common.db.lean_tx import LeanConnection, _wrap

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
    events = conn._has_events or conn.engine._has_events
    cursor = None
    try:
        cursor = conn.connection.cursor()
        if events:
            for fn in conn.dispatch.before_cursor_execute:
                statement, params = fn(conn, cursor, statement, params, None, False)
        try:
            cursor.execute(statement, params)
            count = int(cursor.rowcount)
        except conn.dialect.loaded_dbapi.Error:
            raise
        except Exception as err:  # the driver's adapter refused a value
            raise sa_exc.StatementError(str(err), statement, params, err) from err
        if events:
            conn.dispatch.after_cursor_execute(conn, cursor, statement, params, None, False)
    except conn.dialect.loaded_dbapi.Error as err:
        raise _wrap(conn, err, statement, params, cursor) from err
    finally:
        if cursor is not None:
            with contextlib.suppress(Exception):
                cursor.close()
    return count
