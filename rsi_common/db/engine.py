"""Engines and sessions for SQLite (embedded) and PostgreSQL (distributed).

Pools, journal and durability (docs/performance/record-path.md):

* **PostgreSQL** — a ``QueuePool`` of :data:`DEFAULT_POOL_SIZE` connections kept (plus as many
  overflow ones), so every thread of a host or worker process keeps its own connection instead of
  reconnecting; size it to at least the process's threads (``make_engine(url, pool_size=n)``,
  ``RsiClient(pool_size=n)``). ``pool_pre_ping`` tests a connection when it is checked out, so a
  restarted server costs no failed turn.
* **SQLite** — the file database in **WAL** mode with ``synchronous=NORMAL``: a commit appends to the
  write-ahead log without waiting for the disk; the log is synced at each checkpoint. A power loss
  (not a process crash) can lose the last commits before the checkpoint, never corrupt the file — a
  host that needs every turn on disk at return sets ``PRAGMA synchronous=FULL`` on its own engine.
  One writer at a time: every transaction starts with ``BEGIN IMMEDIATE`` and writers queue on the
  lock (busy timeout :data:`SQLITE_BUSY_TIMEOUT_MS`); readers of other connections are not blocked.
  The pool keeps :data:`DEFAULT_POOL_SIZE` connections so threads do not reopen the file; more
  threads than one add no write throughput, only overlap their Python work with the writer.

Transactions. Repository functions run inside the caller's transaction
(``with factory.begin() as session: ...``) and never commit themselves. Functions that read
then write (``seq`` numbering, fenced final write, retention) first lock the agent row:

* **PostgreSQL** — ``SELECT … FOR UPDATE`` on the ``rsi_agents`` row serialises writers of one
  agent; other agents proceed in parallel (isolation READ COMMITTED).
* **SQLite** — the engine emits ``BEGIN IMMEDIATE`` for every transaction, so a transaction holds
  the database's write lock from its first statement and a read-then-write cannot be invalidated
  by a concurrent writer (a deferred ``BEGIN`` would fail with ``SQLITE_BUSY`` on upgrade). Writers
  wait up to the busy timeout; WAL mode keeps readers of other connections unblocked. A read-only
  caller may ask for a deferred transaction with the execution option
  ``{"sqlite_begin": "DEFERRED"}`` (``session.connection(execution_options=...)`` as the first
  statement, or ``Session(execution_options=...)``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db.lean_tx import execute_on_cursor
from rsi_common.db.write_turn import register as register_write_turns

try:
    import fcntl
except ImportError:  # not POSIX: the busy handler alone
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_POOL_SIZE", "SQLITE_BUSY_TIMEOUT_MS", "EncodedJSON", "encode_json", "make_engine",
    "session_factory",
]

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for the write lock before failing."""
SQLITE_CHECKPOINT_S = 0.25
"""Interval of the background WAL checkpoint of a file SQLite database (see :class:`_Checkpointer`)."""
SQLITE_AUTOCHECKPOINT_PAGES = 10_000
"""WAL pages (4 KiB) after which a commit checkpoints by itself: only when the background
checkpoint falls behind (SQLite's default is 1,000)."""
DEFAULT_POOL_SIZE = 16
"""Connections a pool keeps (PostgreSQL and file SQLite); as many again may open under a burst."""

_BEGIN_MODES = ("DEFERRED", "IMMEDIATE", "EXCLUSIVE")

_dumps = functools.partial(json.dumps, allow_nan=False)


class EncodedJSON:
    """A JSON column value encoded already (:func:`encode_json`), bound as its text: a writer
    encodes large documents before ``BEGIN`` so the write turn is not held while Python encodes
    (docs/performance/consolidation.md#short-write-transactions)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def encode_json(value: Any) -> EncodedJSON:
    """``value`` encoded as a JSON column would be (NaN and infinities refused: ``ValueError``)."""
    return EncodedJSON(_dumps(value))


def json_dumps(value: Any) -> str:
    """Serializer of JSON columns: NaN and infinities are refused on every backend (PostgreSQL's
    ``json`` refuses them; SQLite would store them silently); an :class:`EncodedJSON` is its text."""
    return value.text if type(value) is EncodedJSON else _dumps(value)


def make_engine(url: str | sa.URL, **kwargs: Any) -> Engine:
    """Create an engine configured for rsi-worker.

    JSON columns are serialized with :data:`json_dumps` (NaN refused) on every backend.
    SQLite: WAL journal, ``busy_timeout`` = :data:`SQLITE_BUSY_TIMEOUT_MS`, foreign keys on,
    ``synchronous=NORMAL``, ``BEGIN IMMEDIATE`` transactions (module docstring); the parent
    directory of a file database is created. PostgreSQL and others: ``pool_pre_ping``. Pools keep
    :data:`DEFAULT_POOL_SIZE` connections (``pool_size``) and open as many more under a burst
    (``max_overflow``) unless given.

    Args:
        url: SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://…``).
        **kwargs: passed to :func:`sqlalchemy.create_engine` (e.g. ``pool_size``).

    Returns:
        The engine; dispose of it when done.
    """
    u = sa.make_url(url)
    kwargs.setdefault("json_serializer", json_dumps)
    memory = not u.database or u.database == ":memory:"
    if "poolclass" not in kwargs and not (u.get_backend_name() == "sqlite" and memory):
        kwargs.setdefault("pool_size", DEFAULT_POOL_SIZE)
        kwargs.setdefault("max_overflow", kwargs["pool_size"])
    if u.get_backend_name() != "sqlite":
        kwargs.setdefault("pool_pre_ping", True)
        return sa.create_engine(u, **kwargs)
    if not memory and not str(u.database).startswith("file:"):
        Path(str(u.database)).expanduser().parent.mkdir(parents=True, exist_ok=True)
    connect_args = dict(kwargs.pop("connect_args", {}))
    connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
    engine = sa.create_engine(u, connect_args=connect_args, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        # The driver must not open transactions itself: SQLAlchemy's "begin" event emits them.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            if not memory:
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA wal_autocheckpoint={SQLITE_AUTOCHECKPOINT_PAGES}")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
        finally:
            cur.close()

    writers = _WriterQueue(None if memory or str(u.database).startswith("file:")
                           else str(Path(str(u.database)).expanduser()) + "-writer.lock")
    checkpointer = None if memory or str(u.database).startswith("file:") else _Checkpointer(str(u.database))
    register_write_turns(engine, writers)  # a deferred read turned into a write (write_turn.py)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = str(conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")).upper()
        if mode not in _BEGIN_MODES:
            raise ValueError(f"sqlite_begin must be one of {_BEGIN_MODES}, got {mode!r}")
        if mode != "DEFERRED":
            writers.enter(conn)
        try:  # on the DB-API cursor, the cursor events fired: no execution context for a BEGIN
            execute_on_cursor(conn, f"BEGIN {mode}", ())
        except BaseException:
            writers.leave(conn.info)
            raise

    @event.listens_for(engine, "commit")
    def _on_commit(conn: Connection) -> None:
        writers.end(conn, commit=True)
        if checkpointer is not None:
            checkpointer.wake()

    @event.listens_for(engine, "rollback")
    def _on_rollback(conn: Connection) -> None:
        writers.end(conn, commit=False)

    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_conn: Any, record: Any) -> None:
        writers.leave(record.info)  # a transaction that ended without commit or rollback

    @event.listens_for(engine, "close")
    def _on_close(dbapi_conn: Any, record: Any) -> None:
        writers.leave(record.info)

    if checkpointer is not None:
        event.listen(engine, "engine_disposed", lambda _engine: checkpointer.stop())

    return engine


class _WriterQueue:
    """The SQLite writers of one engine (one process), one at a time, in arrival order.

    SQLite lets one transaction write; a ``BEGIN IMMEDIATE`` that finds the lock taken waits in the
    busy handler, which polls with growing sleeps (1, 2, 5, 10 … 100 ms): eight threads recording
    at once then wait for sleeps, not for the writer, and a turn's latency reaches seconds. So the
    engine's writers queue on a lock instead, taken before ``BEGIN IMMEDIATE`` and released after
    the ``COMMIT`` (or ``ROLLBACK``) — which is why the commit is run here, in SQLAlchemy's ``commit``
    event, before the lock is released (the driver's own commit that follows finds no transaction
    open and does nothing). Writers of other processes still meet the busy handler.

    No garbage collection starts in the process while it holds the write turn: the automatic
    collector is disabled from the turn's start to its end (when it was enabled) and a collection
    that came due meanwhile runs after the release. A full collection of a worker takes 50–300 ms
    of CPU (tens of thousands of objects), and every thread of the process — the holder included —
    stops for it, so a collection that started under the turn made every writer of the database,
    the host's ``record_turn`` too, wait for it (docs/performance/record-path.md#the-loadtest-tail).
    Holders of several engines in one process share one count (:class:`_GcPause`).
    """

    _KEY = "rsi_sqlite_writer"

    def __init__(self, lock_path: str | None = None) -> None:
        self._lock = threading.Lock()
        self._file = _WriterFile(lock_path) if lock_path is not None and fcntl is not None else None

    def enter(self, conn: Connection) -> None:
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        if not self._lock.acquire(timeout=SQLITE_BUSY_TIMEOUT_MS / 1000):
            raise _no_turn()
        if self._file is not None and not self._file.acquire(deadline):
            self._lock.release()
            raise _no_turn()
        _GC_PAUSE.enter()
        conn.info[self._KEY] = True

    def end(self, conn: Connection, *, commit: bool) -> None:
        if not conn.info.get(self._KEY):
            return
        try:
            dbapi_conn: Any = conn.connection.dbapi_connection
            if commit:
                dbapi_conn.commit()
            else:
                dbapi_conn.rollback()
        except Exception:  # left to SQLAlchemy's own commit or rollback, which reports it
            pass
        finally:
            self.leave(conn.info)

    def leave(self, info: dict[Any, Any]) -> None:
        if info.pop(self._KEY, False):
            if self._file is not None:
                self._file.release()
            _GC_PAUSE.leave()  # before the thread lock: the next holder finds the collector as it was
            self._lock.release()


class _GcPause:
    """The automatic garbage collector paused while any writer of the process holds a write turn
    (:class:`_WriterQueue`): disabled by the first holder when it was enabled, enabled again by the
    last one. A collector disabled by the application stays disabled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._paused = False

    def enter(self) -> None:
        with self._lock:
            if self._holders == 0 and gc.isenabled():
                gc.disable()
                self._paused = True
            self._holders += 1

    def leave(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._paused:
                self._paused = False
                gc.enable()


_GC_PAUSE = _GcPause()


def _no_turn() -> sa.exc.OperationalError:
    return sa.exc.OperationalError("BEGIN IMMEDIATE", {}, TimeoutError(
        f"no write turn within {SQLITE_BUSY_TIMEOUT_MS} ms (database is locked)"))


SQLITE_WRITER_POLL_S = 0.0005
"""How often a writer waiting for another process's write turn tries again (:class:`_WriterFile`)."""


class _WriterFile:
    """The write turn among processes: an exclusive ``flock`` on ``<database>-writer.lock``, taken
    after the process's own queue and before ``BEGIN IMMEDIATE``, released after the ``COMMIT``.

    Without it, writers of different processes (the host and the embedded workers) meet in SQLite's
    busy handler, whose sleeps grow to 100 ms: ``record_turn`` waited up to a second behind a
    worker's write (``rsi loadtest --embedded``). A waiter here retries every
    :data:`SQLITE_WRITER_POLL_S` until the busy timeout. The lock is advisory: SQLite's own lock
    still guards the data (a writer without this file, e.g. another program, is only slower); the
    kernel drops it when its process dies. Used under the queue's thread lock only (one holder per
    process: ``flock`` belongs to the open file, shared by the process's threads); a forked child
    opens the file again (an inherited open file would share the parent's lock).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = 0

    def acquire(self, deadline: float) -> bool:
        assert fcntl is not None
        try:
            if self._fd is None or self._pid != os.getpid():  # a forked child opens its own file
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                self._pid = os.getpid()
        except OSError:  # a read-only directory: SQLite's busy handler alone, as before
            self._fd = None
            return True
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(SQLITE_WRITER_POLL_S)

    def release(self) -> None:
        if self._fd is not None and fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def __del__(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(self._fd)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory bound to ``engine``.

    Objects stay readable after commit (``expire_on_commit=False``): repository functions return
    ORM rows that callers use after the transaction ended.
    """
    return sessionmaker(bind=engine, expire_on_commit=False)


class _Checkpointer:
    """Checkpoints a file SQLite database's write-ahead log off the commit path.

    With SQLite's default, the commit that makes the WAL reach 1,000 pages copies it into the
    database and syncs both — a 20 ms stall every ~80 recorded turns, the p99 of ``record_turn``.
    Here a daemon thread runs ``PRAGMA wal_checkpoint(PASSIVE)`` (which never blocks readers or
    writers) on its own connection every :data:`SQLITE_CHECKPOINT_S` while the engine commits; it
    starts with a commit and ends after ten idle intervals (one last checkpoint first), so an idle
    engine has no thread. Commits still checkpoint by themselves past
    :data:`SQLITE_AUTOCHECKPOINT_PAGES` if the thread falls behind. ``engine.dispose()`` ends the
    thread and closes its connection before it returns (:meth:`stop`), so nothing touches the
    database's files after that (a caller may delete them).
    """

    _IDLE_ROUNDS = 10
    _STOP_WAIT_S = 10.0

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._dirty = False
        self._stop = threading.Event()

    def wake(self) -> None:
        """A commit happened: checkpoint at the next interval (start the thread if needed)."""
        self._dirty = True
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._stop.clear()  # an engine used again after dispose() checkpoints again
                    self._thread = threading.Thread(target=self._run, name="rsi-sqlite-checkpoint",
                                                    daemon=True)
                    self._thread.start()

    def stop(self) -> None:
        """End the thread, if any, and wait (at most 10 s) until its connection is closed."""
        with self._lock:
            thread = self._thread
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._STOP_WAIT_S)

    def _run(self) -> None:
        import sqlite3

        idle = 0
        try:
            uri = f"file:{urllib.parse.quote(str(Path(self.path).expanduser()))}?mode=rw"  # never creates it
            db = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            self._thread = None
            return
        try:
            while idle < self._IDLE_ROUNDS:
                if self._stop.wait(SQLITE_CHECKPOINT_S):
                    return
                if self._dirty:
                    self._dirty, idle = False, 0
                    self._checkpoint(db)
                else:
                    idle += 1
        finally:
            db.close()
            with self._lock:
                self._thread = None
        if self._dirty and not self._stop.is_set():  # a commit raced with the exit: keep checkpointing
            self.wake()

    @staticmethod
    def _checkpoint(db: Any) -> None:
        import sqlite3

        with contextlib.suppress(sqlite3.Error):  # busy or gone: the next round (or a commit past the limit)
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

