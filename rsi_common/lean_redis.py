"""One Lua script called on every recorded turn without redis-py's command path
(docs/performance/record-path.md#the-lean-evalsha).

``Script.__call__`` → ``Redis.evalsha`` → ``execute_command`` costs ~150–200 µs of client CPU per
call: the pool's checkout (a lock, a ``poll`` of the socket, observability counters), the retry
wrapper, the response callbacks. :class:`LeanScript` sends the same ``EVALSHA`` on a connection of
its own per thread, made from the client's pool settings (the same class, host or socket, database,
password, TLS, 1 s timeouts, no retries), and reads the reply with the same parser: the same bytes
go to Redis and the same reply or exception comes back. A ``NOSCRIPT`` reply (a server restarted
empty) runs the wrapped script once through redis-py, which loads it. A connection or timeout
error disconnects the thread's connection (the next call reconnects, as the pool would) and is
raised as redis-py raises it, so callers' ``COORD_ERRORS`` handling is unchanged.

Used only for a plain ``redis.Redis`` on a plain ``ConnectionPool`` (not fakeredis, a single
connection client or a cluster): anything else calls the script as before.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

__all__ = ["LeanScript"]


class LeanScript:
    """``script(keys=…, args=…)`` of a registered script, on per-thread connections (module docstring).

    Thread-safe; fork-safe (a child process makes its own connections). A thread's connection is
    held by that thread only: when the thread ends it is collected, which disconnects it (redis-py's
    ``Connection.__del__``); :meth:`close` disconnects those still open.
    """

    def __init__(self, script: Script) -> None:
        self.script = script
        client = script.registered_client
        pool = getattr(client, "connection_pool", None)
        lean = (type(client) is redis.Redis and type(pool) is redis.ConnectionPool
                and getattr(client, "connection", None) is None)
        self._pool: redis.ConnectionPool | None = pool if lean else None
        self._local = threading.local()
        self._made: weakref.WeakSet[Any] = weakref.WeakSet()  # a finished thread's connection: collected
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __call__(self, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        pool = self._pool
        if pool is None:
            return self.script(keys=keys, args=args)
        conn = self._connection(pool)
        try:
            conn.send_command("EVALSHA", self.script.sha, len(keys), *keys, *args)
            return conn.read_response()
        except NoScriptError:
            return self.script(keys=keys, args=args)  # loads the script, then EVALSHA once more
        except BaseException:
            conn.disconnect()  # a half-read reply must not be read by the next call
            raise

    def _connection(self, pool: redis.ConnectionPool) -> Any:
        if os.getpid() != self._pid:  # forked: the parent's sockets are not ours
            with self._lock:
                if os.getpid() != self._pid:
                    self._local, self._made, self._pid = threading.local(), weakref.WeakSet(), os.getpid()
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = pool.connection_class(**pool.connection_kwargs)
            self._local.conn = conn
            with self._lock:
                self._made.add(conn)
        return conn

    def close(self) -> None:
        """Disconnect every connection made (a later call reconnects)."""
        with self._lock:
            made, self._made, self._local = list(self._made), weakref.WeakSet(), threading.local()
        for conn in made:
            conn.disconnect()
