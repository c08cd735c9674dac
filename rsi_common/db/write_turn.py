"""A read transaction turned into a write in place, on SQLite
(docs/performance/consolidation.md#the-no-signal-path).

Every SQLite writer of an engine takes the engine's write turn (its process queue and the writer
lock file, ``rsi_common/db/engine.py``) before ``BEGIN IMMEDIATE``. A caller that read in a deferred
transaction and then finds it must write (the no-signal run: read, decide, then one write) may take
the same turn *inside* that transaction with :func:`take_write_turn` and write at once: SQLite upgrades
the transaction's read snapshot to a write when no other connection committed since the snapshot was
taken — then the rows read are still the database's, and the write is the write it would have made
in a fresh transaction. Otherwise the first write statement fails at once with ``SQLITE_BUSY``
(``SQLITE_BUSY_SNAPSHOT``: SQLite invokes no busy handler on an upgrade) and nothing was written;
:func:`stale_snapshot` recognises that error, and the caller rolls back and writes in a transaction
of its own. The turn is released as the engine's own writers release it: by the transaction's commit
or rollback (the engine's events), or when the connection returns to the pool.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

__all__ = ["SQLITE_BUSY", "WriteTurns", "register", "stale_snapshot", "take_write_turn"]

SQLITE_BUSY = 5
"""SQLite's primary result code for a lock it could not take (extended codes keep it in the low byte)."""


class WriteTurns(Protocol):
    """The engine's writer queue (``engine._WriterQueue``), as this module uses it."""

    def enter(self, conn: Connection) -> None: ...


_TURNS: weakref.WeakKeyDictionary[Engine, WriteTurns] = weakref.WeakKeyDictionary()


def register(engine: Engine, turns: WriteTurns) -> None:
    """Record ``engine``'s writer queue (``make_engine`` of a SQLite engine)."""
    _TURNS[engine] = turns


def take_write_turn(conn: Connection) -> bool:
    """Take the write turn of ``conn``'s engine for ``conn``'s open transaction (it is released at its
    commit or rollback); ``False`` when the engine has no writer queue (not SQLite: nothing taken).

    Raises:
        sqlalchemy.exc.OperationalError: no turn within the busy timeout (as ``BEGIN IMMEDIATE``).
    """
    turns = _TURNS.get(conn.engine)
    if turns is None:
        return False
    turns.enter(conn)
    return True


def stale_snapshot(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's refusal to upgrade a read transaction to a write (``SQLITE_BUSY``:
    another connection committed since the snapshot, or holds the write lock): nothing was written."""
    orig: Any = getattr(exc, "orig", None)
    code = getattr(orig, "sqlite_errorcode", None)
    return isinstance(exc, OperationalError) and isinstance(code, int) and code & 0xFF == SQLITE_BUSY
