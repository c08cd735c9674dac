"""The coordinator's script calls as bare requests on a pooled connection
(docs/performance/consolidation.md#the-no-signal-path).

A script call through redis-py (``Script.__call__`` → ``evalsha`` → ``execute_command``) costs
~130 µs of client CPU per call on an idle Unix socket: the pool's checkout and check-in (its lock and
a ``can_read`` poll), the retry wrapper, the generic command packer and the response callbacks. A
:class:`Wire` sends the same ``EVALSHA`` packed by hand on a connection it keeps between calls and
reads the reply with the connection's own parser (~40 µs): the same command, the same reply (decoded
as the client decodes), the same keys — a script's answer is the one :class:`Coordinator` gives.

A request is **sent** (:meth:`Wire.send`) and its reply **read** later (:meth:`Wire.reply`), so a
caller can do other work (the quiet run's SQL read) while Redis answers. Anything out of the ordinary
goes through the client as before, with its retry policy: a script the server does not hold
(``NOSCRIPT``: the client loads it), a connection that failed to send or to read (the connection is
dropped; the call is made again through the client, as the client's own retry would re-send it), a
client that is not redis-py's own socket client (fakeredis: :func:`wire` returns ``None``). The
connection's health check runs as with the client (``health_check_interval``); ``send_packed_command``
is what the benchmarks count as a round trip.

Project decision: a :class:`Wire` keeps at most :data:`IDLE_MAX` idle connections (checked out of the
client's pool for good: the pool closes them on ``disconnect``; a process that forked drops them), one
per thread in flight — a worker's quiet runs reuse them instead of the pool's.
"""

from __future__ import annotations

import os
import secrets
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from rsi_common.coord import Coordinator, Lease, lease_key, spend_key

__all__ = ["IDLE_MAX", "Sent", "Wire", "finish", "pack", "renew_reply", "renew_spend_reply", "send_renew",
           "send_renew_and_spend", "try_begin", "wire"]

IDLE_MAX = 16
"""Idle connections a :class:`Wire` keeps; more are returned to the client's pool."""

_LOST = (RedisConnectionError, RedisTimeoutError, OSError)


def _arg(value: bytes | str | int) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return b"%d" % value
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"a Redis argument must be bytes, str or int, got {type(value).__name__}")


def pack(*parts: bytes | str | int) -> bytes:
    """One Redis command in RESP (an array of bulk strings); ``str`` as UTF-8, ``int`` in decimal."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        b = _arg(part)
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


@dataclass
class Sent:
    """A request in flight: read its reply with :meth:`Wire.reply` (exactly once)."""

    script: Script
    keys: Sequence[str]
    args: Sequence[bytes | str | int]
    conn: Any | None
    """The connection it went out on; ``None``: not sent (the reply is the client's call)."""


class Wire:
    """Script calls on connections kept between calls (module docstring); thread-safe."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._pool = client.connection_pool
        self._idle: list[Any] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _take(self) -> Any:
        if self._pid != os.getpid():  # a forked child: the parent's sockets are not ours
            with self._lock:
                self._idle, self._pid = [], os.getpid()
        try:
            return self._idle.pop()
        except IndexError:
            conn: Any = self._pool.get_connection()
            return conn

    def _give(self, conn: Any) -> None:
        if len(self._idle) < IDLE_MAX and self._pid == os.getpid():
            self._idle.append(conn)
        else:
            self._pool.release(conn)

    def _drop(self, conn: Any) -> None:
        conn.disconnect()
        self._pool.release(conn)

    def send(self, script: Script, keys: Sequence[str], args: Sequence[bytes | str | int]) -> Sent:
        """Send ``EVALSHA`` of ``script`` with ``keys`` and ``args``; a failed send is left to
        :meth:`reply` (the client's call)."""
        conn = self._take()
        try:
            conn.send_packed_command([pack(b"EVALSHA", script.sha, len(keys), *keys, *args)])
        except _LOST:
            self._drop(conn)
            return Sent(script, keys, args, None)
        except BaseException:
            self._drop(conn)
            raise
        return Sent(script, keys, args, conn)

    def reply(self, sent: Sent) -> Any:
        """The script's reply to ``sent``, as ``script(keys=…, args=…)`` returns it.

        Raises:
            redis errors: as the client's call raises them (an error reply, a connection the client
                could not use either).
        """
        conn = sent.conn
        if conn is not None:
            try:
                reply = conn.read_response()
            except NoScriptError:  # the connection is clean (an error reply): the client loads it
                self._give(conn)
            except redis.exceptions.ResponseError:
                self._give(conn)
                raise
            except _LOST:
                self._drop(conn)
            except BaseException:
                self._drop(conn)
                raise
            else:
                self._give(conn)
                return reply
        return sent.script(keys=list(sent.keys), args=list(sent.args))

    def call(self, script: Script, keys: Sequence[str], args: Sequence[bytes | str | int]) -> Any:
        """:meth:`send` then :meth:`reply`."""
        return self.reply(self.send(script, keys, args))


_WIRES: weakref.WeakKeyDictionary[redis.Redis, Wire] = weakref.WeakKeyDictionary()
_WIRES_LOCK = threading.Lock()


def wire(client: Any) -> Wire | None:
    """The :class:`Wire` of ``client`` (one per client), or ``None`` when the client is not
    redis-py's own client on a plain connection pool of its socket connections (fakeredis, a
    blocking pool that holding connections could exhaust): callers then use the client itself."""
    found = _WIRES.get(client) if isinstance(client, redis.Redis) else None
    if found is not None:
        return found
    pool = getattr(client, "connection_pool", None)
    if type(client) is not redis.Redis or type(pool) is not redis.ConnectionPool \
            or pool.connection_class.__module__ != "redis.connection":
        return None
    with _WIRES_LOCK:
        return _WIRES.setdefault(client, Wire(client))


# --- the lease's calls of a quiet run -----------------------------------------------------------


def send_renew(w: Wire, coord: Coordinator, lease: Lease) -> Sent:
    """Send :meth:`Coordinator.renew` of ``lease``; its answer is :func:`renew_reply` of the reply."""
    return w.send(coord._renew, [lease_key(lease.agent)], [lease.token, coord.lease_ms])


def renew_reply(reply: Any) -> bool:
    """:meth:`Coordinator.renew`'s answer from its script's reply."""
    return bool(reply)


def send_renew_and_spend(w: Wire, coord: Coordinator, lease: Lease, day: str) -> Sent:
    """Send :meth:`Coordinator.renew_and_spend` of ``(lease, day)``; its answer is
    :func:`renew_spend_reply` of the reply."""
    return w.send(coord._renew_spend, [lease_key(lease.agent), spend_key(day, lease.agent), spend_key(day)],
                  [lease.token, coord.lease_ms])


def renew_spend_reply(reply: Sequence[Any]) -> tuple[bool, tuple[int, int] | None]:
    """:meth:`Coordinator.renew_and_spend`'s answer from its script's reply.

    Raises:
        ValueError: a spend counter holds no integer (as :meth:`Coordinator.spend`).
    """
    renewed = bool(reply[0])
    if len(reply) != 3:
        return renewed, None
    a, c = (v.decode() if isinstance(v, bytes) else v for v in reply[1:])
    return renewed, (int(a if a is not None else 0), int(c if c is not None else 0))


def finish(w: Wire, coord: Coordinator, lease: Lease) -> Lease | None:
    """:meth:`Coordinator.finish` of ``lease`` (the same script, keys and answer) on the wire."""
    new_token = secrets.token_hex(16)
    keys = Coordinator._agent_keys(lease.agent)
    reply = w.call(coord._finish, keys, [lease.token, new_token, coord.lease_ms])
    return Coordinator._lease_reply(lease.agent, new_token, reply)


# --- the record path's hand-off -----------------------------------------------------------------


def try_begin(coord: Coordinator, agent: str, io: str) -> Lease | None:
    """:meth:`Coordinator.try_begin` of ``(agent, io)`` — the same script, keys, arguments and answer —
    on the client's :class:`Wire`, or through the coordinator itself when the client has none
    (fakeredis) or the coordinator is a subclass with a ``try_begin`` of its own (kept, not
    bypassed). A dropped connection or a missing script is sent again through the client, as
    :meth:`Wire.reply` does (docs/performance/record-path.md#the-hand-off-on-the-wire).

    Raises:
        redis errors: as :meth:`Coordinator.try_begin` raises them (the client could not reach Redis
            either).
    """
    w = wire(coord.client) if type(coord).try_begin is Coordinator.try_begin else None
    if w is None:
        return coord.try_begin(agent, io)
    token, keys, args = coord._begin_call(agent, io)
    return Coordinator._begun(agent, token, io, w.call(coord._try_begin, keys, args))
