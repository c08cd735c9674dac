"""Bounded retries of the host's record path (docs/operations/failure-recovery.md#host-retries).

Recording is idempotent by io id (a second ``record_turn`` of the same turn stores nothing new), so a
write that failed on a transient database error — the server restarting, a dropped connection, a
locked SQLite file, an exhausted pool — is simply run again, with exponential backoff, until it
succeeds or the time budget is spent. Then :class:`~rsi_common.errors.TurnNotStored` says the turn
was not stored (the cause is chained). A write that committed on the server but whose
acknowledgement was lost is found stored by the retry. Errors that would fail the same way again
(invalid input, a constraint) are never retried.

The hand-off to Redis and the broker after the commit is retried the same way for a short budget
(:data:`HANDOFF_BUDGET_S`): past it the turn is still stored, its trigger ``deferred`` to the sweeper.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import exc as sa_exc

from rsi_common.errors import TurnNotStored

__all__ = ["HANDOFF_BUDGET_S", "RetryBudget", "is_transient_db", "retry_write"]

log = logging.getLogger(__name__)

T = TypeVar("T")

HANDOFF_BUDGET_S = 0.5
"""Seconds a deferred hand-off (Redis or the broker unreachable) is retried before it is left to the
sweeper: covers a Redis restart without making the host wait for an outage."""


def is_transient_db(exc: BaseException) -> bool:
    """Whether ``exc`` is a database error that may pass: an ``OperationalError`` (server gone or
    restarting, connection refused or reset, SQLite locked), an ``InterfaceError``, a DBAPI error
    that invalidated its connection, or a pool timeout."""
    if isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError,
                        sa_exc.DisconnectionError)):
        return True
    return isinstance(exc, sa_exc.DBAPIError) and bool(exc.connection_invalidated)


@dataclass(frozen=True)
class RetryBudget:
    """How long a write is retried.

    Attributes:
        total_s: the budget in seconds, from the first attempt (0: one attempt, no retry).
        first_s: the first backoff in seconds; doubled per retry up to ``max_s``.
        max_s: the longest single backoff in seconds.
    """

    total_s: float
    first_s: float = 0.05
    max_s: float = 2.0

    def delays(self) -> list[float]:
        """The backoffs, in order, whose sum stays within ``total_s``."""
        out: list[float] = []
        delay, spent = self.first_s, 0.0
        while self.total_s > 0 and spent + delay <= self.total_s:
            out.append(delay)
            spent += delay
            delay = min(self.max_s, delay * 2)
        return out


def retry_write(
    write: Callable[[], T], budget: RetryBudget, *, agent_id: str, io_id: str,
    sleep: Callable[[float], None] | None = None, clock: Callable[[], float] | None = None,
) -> T:
    """Run ``write`` (one idempotent record transaction) until it succeeds, retrying transient
    database errors (:func:`is_transient_db`) within ``budget``; ``sleep`` waits between attempts
    (default ``time.sleep``) and ``clock`` reads the seconds spent (default ``time.monotonic``).

    Raises:
        TurnNotStored: the budget was spent; the last database error is its ``__cause__``.
        Exception: any non-transient error of ``write``, at once (nothing was stored).
    """
    now = clock or time.monotonic
    t0 = now()
    delays = budget.delays()
    attempt = 0
    while True:
        attempt += 1
        try:
            return write()
        except Exception as exc:
            if not is_transient_db(exc):
                raise
            if attempt > len(delays) or now() - t0 + delays[attempt - 1] > budget.total_s + 1e-9:
                raise TurnNotStored(agent_id, io_id, type(exc).__name__, attempt, now() - t0) from exc
            log.warning("agent %s: record attempt %d failed (%s); retrying", agent_id, attempt,
                        type(exc).__name__)
            (sleep or time.sleep)(delays[attempt - 1])
