"""Server-sent events: harness changes and run progress (docs/service/api.md, *Event streams*).

**Harness changes across replicas.** Every replica runs one :class:`HarnessHub`: a daemon thread
subscribed to the Redis channel ``rsi:harness`` (:data:`rsi_common.coord.HARNESS_CHANNEL`) through
the library's :class:`~rsi_common.invalidation.InvalidationListener`. Workers publish an agent id
there on every adoption; any replica publishes on rollback, pin, freeze and clone; the CLI does too.
The hub hands each message to the event streams of this replica that watch that agent, so a host
connected to replica B hears about a rollback made through replica A, or an adoption made by a
worker, one pub/sub delivery later. A stream then reads the agent's row from SQL (the durable
truth) and sends one ``harness`` event when its version or frozen flag differs from what it last
sent. Messages missed while the subscription was down are covered by ``reset``: on every
(re)subscription each stream re-reads its agents and sends what changed.

A stream sends a comment line every :data:`KEEPALIVE_S` seconds so proxies keep it open, and ends
when the replica shuts down; clients reconnect (``retry:`` hint) and get the current state first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import redis

from rsi_common.invalidation import InvalidationListener

__all__ = ["KEEPALIVE_S", "RESET", "HarnessHub", "Subscription", "sse"]

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0
RETRY_MS = 1000
RESET = "\x00reset"
"""Queue item meaning "messages may have been missed: re-read everything"."""
_STOP = "\x00stop"


def sse(event: str, data: Any, *, event_id: str | None = None) -> bytes:
    """One server-sent event (``data`` as one line of JSON)."""
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n".encode()


class Subscription:
    """One stream's queue of agent ids (or :data:`RESET`), fed from the listener thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, wants: Callable[[str], bool]) -> None:
        self.loop = loop
        self.wants = wants
        self.queue: asyncio.Queue[str] = asyncio.Queue(maxsize=10_000)

    def offer(self, item: str) -> None:
        """Called from any thread."""

        def put() -> None:
            if self.queue.full():  # a stuck client: collapse to one reset
                while not self.queue.empty():
                    self.queue.get_nowait()
                item_ = RESET
            else:
                item_ = item
            self.queue.put_nowait(item_)

        with contextlib.suppress(RuntimeError):  # the loop is closed: the stream is gone
            self.loop.call_soon_threadsafe(put)

    async def next(self, timeout_s: float) -> str | None:
        """The next item, or ``None`` after ``timeout_s`` (time for a keep-alive)."""
        try:
            return await asyncio.wait_for(self.queue.get(), timeout_s)
        except TimeoutError:
            return None


class HarnessHub:
    """Fans ``rsi:harness`` messages out to this replica's streams (module docstring).

    Args:
        client: the Redis client; the listener takes a pub/sub connection from its pool.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._subs: set[Subscription] = set()
        self._lock = threading.Lock()
        self._listener = InvalidationListener(client, self._on_agent, self._on_reset)
        self._started = False
        self.stopping = False

    def subscribe(self, wants: Callable[[str], bool]) -> Subscription:
        """A new subscription for the agents ``wants`` accepts (starts the listener on first use)."""
        sub = Subscription(asyncio.get_running_loop(), wants)
        with self._lock:
            self._subs.add(sub)
            if not self._started:
                self._started = True
                self._listener.start()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subs.discard(sub)

    def wait_subscribed(self, timeout_s: float) -> bool:
        """Start the listener and wait for its subscription (tests, readiness)."""
        with self._lock:
            if not self._started:
                self._started = True
                self._listener.start()
        return self._listener.wait_subscribed(timeout_s)

    @property
    def streams(self) -> int:
        with self._lock:
            return len(self._subs)

    def _on_agent(self, agent: str) -> None:
        with self._lock:
            subs = [s for s in self._subs if s.wants(agent)]
        for s in subs:
            s.offer(agent)

    def _on_reset(self) -> None:
        self.broadcast(RESET)

    def broadcast(self, item: str) -> None:
        with self._lock:
            subs = list(self._subs)
        for s in subs:
            s.offer(item)

    def stop(self) -> None:
        """End every stream and the listener."""
        self.stopping = True
        self.broadcast(_STOP)
        self._listener.stop()


async def stream_items(hub: HarnessHub, sub: Subscription) -> AsyncIterator[str | None]:
    """Items of ``sub`` until the hub stops; ``None`` when a keep-alive is due."""
    try:
        while not hub.stopping:
            item = await sub.next(KEEPALIVE_S)
            if item == _STOP:
                return
            yield item
    finally:
        hub.unsubscribe(sub)
