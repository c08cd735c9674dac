"""kombu's Redis transport with a channel that keeps its publishing client
(docs/performance/record-path.md#the-publish-on-a-kept-client).

kombu's Redis channel makes a new ``redis.Redis`` for every message it puts (``conn_or_acquire`` →
``_create_client``), and redis-py's constructor builds its table of response callbacks each time:
about 40 % of the client CPU of a publish, twice per enqueue with the ``task-sent`` event. The
channel here makes that client once per connection pool of the channel and hands the same one to
every put: the same pool, the same connections, the same commands, so what reaches Redis is
byte for byte what kombu sends (a ``redis.Redis`` on a given pool holds no state of its own besides
its callbacks and options). A channel whose pool is dropped (kombu's ``_disconnect_pools``, after a
fork or a close) makes a new client on its next pool.

Only the plain Redis transport (``redis://``, ``rediss://``, ``redis+socket://``) is replaced; every
other transport (``memory://``, ``sentinel://``, ``amqp://``) is left as kombu resolves it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import kombu.connection
from kombu.transport import redis as kombu_redis

__all__ = ["KeptClientChannel", "KeptClientConnection", "KeptClientTransport"]

_REDIS_TRANSPORTS = frozenset({"redis", "rediss"})
"""kombu's names of :class:`kombu.transport.redis.Transport` (its ``TRANSPORT_ALIASES``)."""


class KeptClientChannel(kombu_redis.Channel):
    """A Redis channel whose puts share one client per connection pool (module docstring)."""

    _kept: tuple[Any, Any] | None = None
    """``(pool, client)``: the client made for that pool."""

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """``client`` if given, else this channel's kept client of its current pool."""
        if client:
            yield client
            return
        pool = self.pool
        kept = self._kept
        if kept is None or kept[0] is not pool:
            kept = self._kept = (pool, cast(Any, self)._create_client())
        yield kept[1]

    def _disconnect_pools(self) -> None:
        self._kept = None
        cast(Any, super())._disconnect_pools()


class KeptClientTransport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`KeptClientChannel`."""

    Channel = KeptClientChannel


class _ResolvesKeptClient:
    """Resolves kombu's plain Redis transport to :class:`KeptClientTransport` (a mixin of kombu's
    ``Connection`` classes: ``_init_params`` is where kombu sets ``transport_cls``)."""

    transport_cls: Any

    def _init_params(self, *args: Any, **kwargs: Any) -> None:
        cast(Any, super())._init_params(*args, **kwargs)
        if self.transport_cls in _REDIS_TRANSPORTS:
            self.transport_cls = KeptClientTransport


class KeptClientConnection(_ResolvesKeptClient, kombu.connection.Connection):
    """A kombu ``Connection`` that resolves kombu's plain Redis transport to
    :class:`KeptClientTransport`; any other transport as kombu resolves it. Its clones and the
    connections of its :meth:`Pool` resolve the same way (kombu rebuilds them from the URL, whose
    ``redis+socket`` prefix would otherwise name the plain transport again)."""

    def Pool(self, limit: int | None = None, **kwargs: Any) -> Any:
        """kombu's connection pool of this connection's settings, with connections of this kind."""
        return cast(Any, _KeptConnectionPool)(self, limit=limit, **kwargs)


class _KeptPooledConnection(_ResolvesKeptClient, kombu.connection.PooledConnection):
    """kombu's pooled connection, resolving as :class:`KeptClientConnection`."""


class _KeptConnectionPool(kombu.connection.ConnectionPool):
    def new(self) -> Any:
        return cast(Any, _KeptPooledConnection)(self, **dict(self.connection._info(resolve=False)))
