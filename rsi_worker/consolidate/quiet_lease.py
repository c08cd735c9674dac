"""The quiet run's two Redis round trips on the wire (docs/performance/consolidation.md#the-no-signal-path).

:func:`send_renewal` sends the lease renewal and the spend read (``spend.renew_over_cap``'s one script
call) *before* the quiet run's SQL read, and :func:`renewal` reads the answer after the decision:
Redis answers while SQLite reads, and the renewal still comes before the run's one write (the
lease's guarantee is unchanged: the write follows a renewal within the run's own milliseconds, and
the SQL write is fenced). A run the fast path declines reads and drops the answer
(:func:`discard`): the full path renews on its own. :func:`finish` is ``Coordinator.finish`` on the
wire. Both go through :mod:`rsi_common.coord_wire` (a hand-packed ``EVALSHA`` on a kept connection)
where the client allows it, else through the coordinator itself: the answers are the same.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rsi_common.coord import Lease
from rsi_common.coord_wire import (
    Sent,
    Wire,
    renew_reply,
    renew_spend_reply,
    send_renew,
    send_renew_and_spend,
    wire,
)
from rsi_common.coord_wire import finish as wire_finish
from rsi_common.handoff import COORD_ERRORS
from rsi_worker.consolidate.context import Deps
from rsi_worker.consolidate.spend import Spend, renew_over_cap, spend_reached, today

__all__ = ["Renewal", "discard", "finish", "renewal", "send_renewal"]

log = logging.getLogger(__name__)

_DROPPED: tuple[type[BaseException], ...] = (*COORD_ERRORS, ValueError)


@dataclass
class Renewal:
    """A renewal in flight (:func:`send_renewal`); read it once, with :func:`renewal` or
    :func:`discard`."""

    lease: Lease
    day: str | None
    """The spend's UTC day; ``None``: no cap is set (the renewal alone)."""
    pending: tuple[Wire, Sent] | None
    """The wire and the request on it; ``None``: nothing sent (no wire): :func:`renewal` calls
    ``renew_over_cap``."""


def send_renewal(deps: Deps, lease: Lease) -> Renewal:
    """Send ``renew_over_cap(deps, lease)``'s request; a send that fails is retried by :func:`renewal`
    through the client."""
    p = deps.params
    day = today() if (p.agent_daily_tokens or p.cluster_daily_tokens) else None
    w = wire(getattr(deps.coord, "client", None))
    if w is None:
        return Renewal(lease, day, None)
    coord = deps.coord
    sent = send_renew(w, coord, lease) if day is None else send_renew_and_spend(w, coord, lease, day)
    return Renewal(lease, day, (w, sent))


def renewal(deps: Deps, r: Renewal) -> tuple[bool, Spend | None]:
    """``renew_over_cap``'s answer to the request ``r``.

    Raises:
        redis errors: as ``renew_over_cap`` (the renewal failed).
        ValueError: a spend counter holds no integer.
    """
    if r.pending is None:
        return renew_over_cap(deps, r.lease)
    w, sent = r.pending
    reply = w.reply(sent)
    if r.day is None:
        return renew_reply(reply), None
    renewed, spent = renew_spend_reply(reply)
    return renewed, spend_reached(deps, r.lease.agent, r.day, spent)


def discard(deps: Deps, r: Renewal) -> None:
    """Read and drop the answer to ``r`` (the fast path declined: the full path renews itself); an
    error is the full path's to meet."""
    if r.pending is None:
        return
    w, sent = r.pending
    try:
        w.reply(sent)
    except _DROPPED as exc:
        log.debug("agent %s: a dropped renewal failed (%s)", r.lease.agent, type(exc).__name__)


def finish(deps: Deps, lease: Lease) -> Lease | None:
    """``deps.coord.finish(lease)``, on the wire where the client allows it."""
    w = wire(getattr(deps.coord, "client", None))
    return deps.coord.finish(lease) if w is None else wire_finish(w, deps.coord, lease)
