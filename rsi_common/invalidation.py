"""Host-side harness cache and its invalidation listener (docs/algorithm/consolidation.md §3.12.9).

:class:`HarnessCache` keeps each agent's resolved harness for ``ttl_s`` seconds per process.
:class:`InvalidationListener` is a daemon thread subscribed to
:data:`~rsi_common.coord.HARNESS_CHANNEL`; every message (an agent id) drops that agent's entry at
once, so an adoption, rollback, pin or clone is seen by every host within one pub/sub delivery.

Staleness bounds (decisions where the spec is silent):

* While subscribed, a change is visible as soon as its message arrives (the tests measure it).
* Messages published while the listener is not subscribed (start-up, a Redis outage) are lost,
  so every successful (re)subscription **clears the whole cache**; until then the TTL bounds
  staleness. Without Redis the TTL is the only bound.
* A read that raced an invalidation is not cached: :meth:`HarnessCache.token` is taken before the
  database read and :meth:`HarnessCache.put` drops the value if the agent was invalidated (or the
  cache cleared) since.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import redis

from rsi_common.coord import HARNESS_CHANNEL

__all__ = ["HarnessCache", "InvalidationListener"]

log = logging.getLogger(__name__)

V = TypeVar("V")


class HarnessCache(Generic[V]):
    """A thread-safe per-agent TTL cache with invalidation tokens.

    Args:
        ttl_s: seconds an entry is served after it was stored; 0 disables caching.
        max_entries: the oldest entries are dropped beyond this many agents.
        clock: monotonic clock in seconds (tests inject one).
    """

    def __init__(self, ttl_s: float, *, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = float(ttl_s)
        self.max_entries = max_entries
        self._clock = clock
        self._entries: dict[str, tuple[float, V]] = {}
        self._gens: dict[str, int] = {}
        self._epoch = 0
        self._lock = threading.Lock()

    def get(self, agent: str) -> V | None:
        """The agent's entry if it is younger than the TTL, else ``None``."""
        with self._lock:
            entry = self._entries.get(agent)
            if entry is None:
                return None
            if self._clock() >= entry[0]:
                del self._entries[agent]
                return None
            return entry[1]

    def token(self, agent: str) -> tuple[int, int]:
        """Take before reading the value to cache; pass to :meth:`put`."""
        with self._lock:
            return self._epoch, self._gens.get(agent, 0)

    def put(self, agent: str, value: V, token: tuple[int, int]) -> bool:
        """Store ``value`` unless the agent was invalidated (or the cache cleared) since ``token``.

        Returns:
            Whether the value was stored.
        """
        if self.ttl_s <= 0:
            return False
        with self._lock:
            if token != (self._epoch, self._gens.get(agent, 0)):
                return False
            self._entries.pop(agent, None)
            while len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]
            self._entries[agent] = (self._clock() + self.ttl_s, value)
            return True

    def invalidate(self, agent: str) -> None:
        """Drop the agent's entry and make concurrent reads of it uncacheable."""
        with self._lock:
            self._entries.pop(agent, None)
            self._gens[agent] = self._gens.get(agent, 0) + 1

    def clear(self) -> None:
        """Drop every entry and make every concurrent read uncacheable."""
        with self._lock:
            self._entries.clear()
            self._gens.clear()
            self._epoch += 1

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class InvalidationListener:
    """Daemon thread subscribed to :data:`HARNESS_CHANNEL`.

    Reconnects after any Redis error with exponential backoff (``backoff_min_s`` doubling up to
    ``backoff_max_s``); calls ``on_reset()`` after every successful (re)subscription and
    ``on_agent(agent_id)`` for every message. Stops within ``poll_s`` of :meth:`stop`.

    Args:
        client: Redis client (a pub/sub connection is taken from its pool).
        on_agent: called with the agent id of each message (from the listener thread).
        on_reset: called when a subscription (re)starts (messages may have been missed before).
        poll_s: longest wait for one message before the stop flag is checked again.
    """

    def __init__(
        self,
        client: redis.Redis,
        on_agent: Callable[[str], None],
        on_reset: Callable[[], None],
        *,
        poll_s: float = 0.2,
        backoff_min_s: float = 0.05,
        backoff_max_s: float = 5.0,
    ) -> None:
        self._client: Any = client  # redis-py's pubsub() is untyped
        self._on_agent = on_agent
        self._on_reset = on_reset
        self._poll_s = poll_s
        self._backoff = (backoff_min_s, backoff_max_s)
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.reconnects = 0
        """Subscriptions that failed and were retried (for diagnostics)."""

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread unless it runs already (idempotent, thread-safe)."""
        with self._lock:
            if self.running or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="rsi-harness-invalidation", daemon=True)
            self._thread.start()

    def wait_subscribed(self, timeout_s: float) -> bool:
        """Wait until the channel subscription is confirmed; False on timeout."""
        return self._subscribed.wait(timeout_s)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread and wait for it (at most ``timeout_s``); it cannot be restarted."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _run(self) -> None:
        delay = self._backoff[0]
        while not self._stop.is_set():
            pubsub = self._client.pubsub()
            try:
                pubsub.subscribe(HARNESS_CHANNEL)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=self._poll_s)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self._on_reset()
                        self._subscribed.set()
                        delay = self._backoff[0]
                    elif message["type"] == "message":
                        data = message["data"]
                        self._on_agent(data.decode() if isinstance(data, bytes) else str(data))
            except (redis.RedisError, OSError, ValueError) as exc:
                self._subscribed.clear()
                self.reconnects += 1
                log.debug("harness invalidation listener: %s; retrying in %.2f s", type(exc).__name__, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self._backoff[1])
            finally:
                self._subscribed.clear()
                try:
                    pubsub.close()
                except Exception:  # the connection is being dropped anyway
                    log.debug("harness invalidation listener: closing the pub/sub connection failed")
