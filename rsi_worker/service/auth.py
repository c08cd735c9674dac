"""Who is calling: API tokens (``Authorization: Bearer …`` or the console's login cookie), their scopes,
their agent-id prefix and their rate limit (docs/service/access.md).

Verified tokens are cached per replica for :data:`TOKEN_CACHE_S` seconds (a revocation reaches every
replica within that time); ``last_used_at`` is written at most once a minute per token and replica.
Every refusal is a problem document: 401 without a valid token (``WWW-Authenticate: Bearer``), 403
for a missing scope or an agent outside the token's prefix, 429 over the rate limit.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.credentials import safe_repr
from rsi_worker.service.problems import Problem
from rsi_worker.service.ratelimit import RateLimiter

__all__ = ["TOKEN_CACHE_S", "Authenticator", "Principal"]

TOKEN_CACHE_S = 5.0
"""Seconds a verified token is trusted without reading its row again."""
TOUCH_EVERY_S = 60.0
_MAX_CACHED = 10_000


@dataclass(frozen=True)
class Principal:
    """A verified token: id, name, expanded scopes, tenant prefix, rate limit per minute (0 = none)."""

    token_id: str
    name: str
    scopes: frozenset[str]
    agent_prefix: str | None
    rate_per_min: int

    def has(self, scope: str) -> bool:
        """Whether the token holds ``scope`` (directly or implied)."""
        return scope in self.scopes

    def require(self, scope: str) -> None:
        """Raise 403 unless the token holds ``scope``."""
        if scope not in self.scopes:
            raise Problem(403, "missing-scope", f"this token lacks the {scope!r} scope")

    def sees(self, agent_id: str) -> bool:
        """Whether the agent is inside the token's prefix."""
        return self.agent_prefix is None or agent_id.startswith(self.agent_prefix)

    def check_agent(self, agent_id: str) -> None:
        """Raise 403 when the agent is outside the token's prefix (before the agent is looked up, so
        the answer says nothing about whether it exists)."""
        if not self.sees(agent_id):
            raise Problem(
                403, "outside-tenant", f"agent {safe_repr(agent_id)} is outside this token's agent-id prefix"
            )


class Authenticator:
    """Verifies tokens against ``rsi_tokens`` and applies rate limits (module docstring).

    Args:
        sessions: the session factory of the service's database.
        limiter: the Redis rate limiter.
        default_rate_per_min: the limit of tokens without one of their own (0 = none).
        clock: monotonic clock in seconds (tests inject one).
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        limiter: RateLimiter,
        default_rate_per_min: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions = sessions
        self.limiter = limiter
        self.default_rate_per_min = default_rate_per_min
        self._clock = clock
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._touched: dict[str, float] = {}
        self._lock = threading.Lock()

    def verify(self, token: str | None) -> Principal:
        """The principal of ``token``.

        Raises:
            Problem: 401 when the token is missing, malformed, unknown or revoked.
        """
        if not token:
            raise _unauthorized("give a token: Authorization: Bearer <token>")
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
        now = self._clock()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            principal = hit[1]
        else:
            principal = self._load(token)
            with self._lock:
                if len(self._cache) >= _MAX_CACHED:
                    self._cache.clear()
                self._cache[key] = (now + TOKEN_CACHE_S, principal)
        if principal is None:
            raise _unauthorized("the token is unknown or revoked")
        return principal

    def _load(self, token: str) -> Principal | None:
        with self._sessions.begin() as s:
            row = db.find_token(s, token)
            if row is None:
                return None
            now = self._clock()
            if now - self._touched.get(row.id, -TOUCH_EVERY_S) >= TOUCH_EVERY_S:
                self._touched[row.id] = now
                db.touch_token(s, row.id)
            rate = row.rate_per_min if row.rate_per_min is not None else self.default_rate_per_min
            return Principal(row.id, row.name, db.expand_scopes(row.scope_list), row.agent_prefix, rate)

    def forget(self) -> None:
        """Drop every cached verdict (tests, and this replica after it revokes a token)."""
        with self._lock:
            self._cache.clear()

    def admit(self, principal: Principal) -> None:
        """Count one request against the token's rate limit.

        Raises:
            Problem: 429 with ``Retry-After`` when the token is over its limit this minute.
        """
        decision = self.limiter.hit(principal.token_id, principal.rate_per_min)
        if not decision.allowed:
            raise Problem(
                429,
                "rate-limited",
                f"this token is limited to {decision.limit} requests per minute",
                headers={"Retry-After": str(decision.retry_after_s)},
                retry_after_s=decision.retry_after_s,
            )


def _unauthorized(detail: str) -> Problem:
    return Problem(401, "unauthorized", detail, headers={"WWW-Authenticate": 'Bearer realm="rsi"'})
