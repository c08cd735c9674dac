"""Per-token rate limits in Redis (docs/service/access.md, *Rate limits*).

A fixed one-minute window per token, shared by every replica: one Lua script increments
``rsi:rate:{token}:{minute}`` (the key schema is in :mod:`rsi_common.coord`) and sets its expiry on the
first hit, so a burst spread across replicas is counted once. A request over the token's limit is
answered 429 with ``Retry-After`` (seconds to the next window, by the Redis server's clock).

Fail open: when Redis cannot be reached the request is let through (and counted in
``rsi_api_rate_limit_errors_total``): a Redis outage must not take the recording path down with it,
and recording itself degrades gracefully then (the sweeper hands off the turns).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from rsi_common.coord import rate_key
from rsi_common.handoff import COORD_ERRORS

__all__ = ["RateDecision", "RateLimiter"]

log = logging.getLogger(__name__)

WINDOW_S = 60
# KEYS: none. ARGV: token id, limit[, now in epoch seconds (else the server's TIME)].
# -> {count, seconds to the next window}.
_HIT = """
local now = tonumber(ARGV[3] or redis.call('TIME')[1])
local minute = math.floor(now / 60)
local key = 'rsi:rate:' .. ARGV[1] .. ':' .. minute
local n = redis.call('INCR', key)
if n == 1 then redis.call('EXPIRE', key, 120) end
return {n, 60 - (now % 60)}
"""


@dataclass(frozen=True)
class RateDecision:
    """One request's verdict: ``allowed``; ``count`` in this window; ``retry_after_s`` to the next one."""

    allowed: bool
    count: int
    limit: int
    retry_after_s: int


class RateLimiter:
    """Counts requests per token per minute in Redis (module docstring).

    Args:
        client: the Redis client (coordination).
        clock: epoch seconds that place a request in its window; ``None`` (the default): the Redis
            server's clock, shared by every replica. A test fixes it, so a burst is never split by
            a minute boundary.
    """

    def __init__(self, client: redis.Redis, *, clock: Callable[[], float] | None = None) -> None:
        self._client: Any = client
        self._script = client.register_script(_HIT)
        self.clock = clock
        self.errors = 0
        """Checks that found Redis unreachable (and let the request through)."""

    def hit(self, token_id: str, limit: int) -> RateDecision:
        """Count one request of ``token_id`` against ``limit`` per minute (0 = unlimited: not counted)."""
        if limit <= 0:
            return RateDecision(True, 0, 0, 0)
        try:
            now = [] if self.clock is None else [int(self.clock())]
            count, retry = self._script(keys=[], args=[token_id, limit, *now])
        except COORD_ERRORS as exc:
            self.errors += 1
            log.warning("rate limit not checked (%s): request let through", type(exc).__name__)
            return RateDecision(True, 0, limit, 0)
        return RateDecision(int(count) <= limit, int(count), limit, max(1, int(retry)))

    @staticmethod
    def key(token_id: str, minute: int) -> str:
        """The Redis key of one token's window (for tests and operators)."""
        return rate_key(token_id, minute)
