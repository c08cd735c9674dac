"""The record transaction without SQLAlchemy's transaction objects (docs/performance/record-path.md,
"The lean transaction").

``engine.begin()`` costs ~120 µs of Python per transaction beyond the driver's work (the
``Connection``'s ``RootTransaction``, its context manager, ``BEGIN`` through an execution context),
and ``Connection.exec_driver_sql`` ~30 µs per statement beyond ``cursor.execute``. The record path
runs three statements per turn, so both matter. Here:

* :func:`lean_begin` checks a DB-API connection out of the engine's pool (``raw_connection``: the
  pool's events and pre-ping as before) and wraps it in a ``Connection`` that never begins a
  transaction by itself (``_allow_autobegin=False``); it fires the engine's ``begin``, ``commit``
  and ``rollback`` events itself, around the dialect's ``do_begin``/``do_commit``/``do_rollback``
  — so SQLite's writer queue, its lock file and its ``BEGIN IMMEDIATE`` (all in the engine's own
  listeners, ``rsi_common/db/engine.py``) and every statement counter see the same calls as with
  ``engine.begin()``. Core constructs (the rare paths: a repeated turn, retention, marks) run on the
  yielded connection as usual.
* :func:`run_driver_sql` runs one statement on that connection's DB-API cursor, firing the
  engine's ``before_cursor_execute`` (listeners may rewrite it, as with ``retval=True``) and
  ``after_cursor_execute`` events, and raises what ``Connection.execute`` raises for a driver error:
  the matching :class:`sqlalchemy.exc.DBAPIError` subclass (``OperationalError`` …) with the driver's
  error as ``orig``, ``connection_invalidated`` set (and the connection invalidated) for a
  disconnect — the record path's retry (``rsi_common/record_retry.py``) depends on both.

Nothing is stored partially: any exception inside the block rolls the transaction back (rollback
event, then the driver's rollback) before the connection returns to the pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import PoolProxiedConnection

__all__ = ["LeanConnection", "execute_on_cursor", "lean_begin", "on_cursor", "run_driver_sql"]

T = TypeVar("T")


class LeanConnection(Connection):
    """A ``Connection`` on a checked-out DB-API connection whose transaction :func:`lean_begin`
    runs: it never begins one itself (executing on it outside :func:`lean_begin` raises)."""


def _wrap(conn: Connection, err: BaseException, statement: str, params: Any,
          cursor: Any | None) -> BaseException:
    """The SQLAlchemy exception ``Connection.execute`` would raise for the driver error ``err``
    (a disconnect invalidates the connection first), or ``err`` itself when it is not a driver error."""
    dialect = conn.dialect
    dbapi_error = dialect.loaded_dbapi.Error
    if not isinstance(err, dbapi_error):
        return err
    fairy = conn.connection
    invalid = bool(dialect.is_disconnect(err, fairy, cursor))
    if invalid:
        fairy.invalidate(err)
    return sa_exc.DBAPIError.instance(statement, params, err, dbapi_error,
                                      hide_parameters=conn.engine.hide_parameters, dialect=dialect,
                                      connection_invalidated=invalid)


def run_driver_sql(conn: Connection, statement: str, params: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
    """Run ``statement`` with ``params`` (the driver's parameter style) on ``conn``'s DB-API cursor
    inside its transaction; returns every row the statement returned, as the driver returns them
    (tuples), or ``[]``.

    A ``Connection`` not in a transaction (one from ``engine.connect()``) begins one first, as its
    autobegin would. Fires ``before_cursor_execute``/``after_cursor_execute`` (context ``None``).

    Raises:
        sqlalchemy.exc.DBAPIError: the driver's error, as ``Connection.execute`` raises it.
        sqlalchemy.exc.StatementError: the driver could not adapt a value (e.g. psycopg's JSON
            dump of a value that is not JSON), the original error as ``orig``.
    """
    if not isinstance(conn, LeanConnection) and not conn.in_transaction():
        conn.begin()
    return execute_on_cursor(conn, statement, params)


def execute_on_cursor(conn: Connection, statement: str,
                      params: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
    """:func:`run_driver_sql` without beginning a transaction: for the engine's ``begin`` listener,
    which sends SQLite's ``BEGIN IMMEDIATE`` itself."""
    return on_cursor(conn, statement, params, _all_rows)


def _all_rows(cursor: Any) -> list[Any]:
    return list(cursor.fetchall()) if cursor.description is not None else []


def on_cursor(conn: Connection, statement: str, params: Sequence[Any] | Mapping[str, Any],
              take: Callable[[Any], T]) -> T:
    """Run ``statement`` on ``conn``'s DB-API cursor (no transaction begun) and return ``take(cursor)``
    read right after it ran; the engine's cursor events fire around it and a driver error is raised
    as ``Connection.execute`` raises it (see :func:`run_driver_sql`)."""
    events = conn._has_events or conn.engine._has_events
    cursor = None
    try:
        cursor = conn.connection.cursor()
        if events:
            for fn in conn.dispatch.before_cursor_execute:
                statement, params = fn(conn, cursor, statement, params, None, False)
        try:
            cursor.execute(statement, params)
            out = take(cursor)
        except conn.dialect.loaded_dbapi.Error:
            raise
        except Exception as err:  # the driver's adapter refused a value (psycopg's Json dumps late)
            raise sa_exc.StatementError(str(err), statement, params, err) from err
        if events:
            conn.dispatch.after_cursor_execute(conn, cursor, statement, params, None, False)
    except conn.dialect.loaded_dbapi.Error as err:
        raise _wrap(conn, err, statement, params, cursor) from err
    finally:
        if cursor is not None:
            with contextlib.suppress(Exception):
                cursor.close()
    return out


@contextlib.contextmanager
def lean_begin(engine: Engine) -> Iterator[Connection]:
    """One transaction on a pooled connection, committed when the block exits normally and rolled
    back when it raises (module docstring): the engine's ``begin``/``commit``/``rollback`` events
    fire as with ``engine.begin()``.

    Raises:
        sqlalchemy.exc.DBAPIError: no connection could be made (wrapped as ``engine.connect()``
            wraps it), or the driver refused the begin or the commit (the transaction is rolled
            back; nothing is stored).
    """
    try:
        fairy = engine.raw_connection()
    except engine.dialect.loaded_dbapi.Error as err:  # wrapped as ``engine.connect()`` wraps it: a
        # server that cannot be reached is an ``OperationalError`` the record path retries
        Connection._handle_dbapi_exception_noconnection(err, engine.dialect, engine)
    conn = LeanConnection(engine, fairy, _allow_autobegin=False)
    dialect = engine.dialect
    events = conn._has_events or engine._has_events
    try:
        try:
            if events:
                conn.dispatch.begin(conn)
            dialect.do_begin(fairy)
        except dialect.loaded_dbapi.Error as err:
            raise _wrap(conn, err, "BEGIN", (), None) from err
        try:
            yield conn
            if events:
                conn.dispatch.commit(conn)
            try:
                dialect.do_commit(fairy)
            except dialect.loaded_dbapi.Error as err:
                raise _wrap(conn, err, "COMMIT", (), None) from err
        except BaseException:
            _rollback(conn, fairy, events)
            raise
    finally:
        fairy.close()  # back to the pool (an invalidated one is discarded)


def _rollback(conn: Connection, fairy: PoolProxiedConnection, events: bool) -> None:
    """Roll back after a failure; a connection gone meanwhile is left to the pool (the server
    rolls an open transaction back when its connection closes)."""
    try:
        if events:
            conn.dispatch.rollback(conn)
        if fairy.dbapi_connection is not None:
            conn.dialect.do_rollback(fairy)
    except Exception as err:  # the original error is what the caller sees
        if isinstance(err, conn.dialect.loaded_dbapi.Error) and conn.dialect.is_disconnect(
                err, fairy, None):
            fairy.invalidate(err)
