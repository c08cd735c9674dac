"""The rules that bring a stuck agent back, in one place (``docs/operations/failure-recovery.md``).

* **The re-run rule.** A pending turn is handed to exactly one re-run: the pending mark is consumed
  atomically by whoever begins it (``finish``, ``begin_pending``). A run that ends ``failed`` is
  never re-run automatically — the same input would fail the same way; its turn's signals stay
  fresh (a failed run saves no state), so the agent's next turn picks them up. A run that ends
  ``interrupted`` (its worker died, its lease expired) has its own turn triggered again by the
  sweeper, unless that turn already ended ``interrupted`` or ``failed`` more than
  :data:`MAX_RERUNS` times (:func:`rerun_allowed`): a turn whose runs keep dying is not retried for
  ever.
* **Hand-on.** A re-run lease is enqueued by :func:`hand_on`; if the broker refuses, the lease is
  released and the turn's world is marked not handed off, so the sweeper triggers it again: a
  pending turn is never dropped.
* **Grace periods** of the sweeper's lease checks: :data:`CLOSED_LEASE_GRACE_S`.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.coord import Coordinator, Lease
from rsi_common.dispatch import Dispatcher
from rsi_common.handoff import HandOff, enqueue_lease

__all__ = ["CLOSED_LEASE_GRACE_S", "GAVE_UP", "MAX_RERUNS", "hand_on", "rerun_allowed"]

log = logging.getLogger(__name__)

MAX_RERUNS = 3
"""Automatic re-runs of one turn after its runs ended ``interrupted`` (the re-run rule)."""
GAVE_UP = ("interrupted", "failed")
"""Run statuses that count against :data:`MAX_RERUNS`."""
CLOSED_LEASE_GRACE_S = 10.0
"""A lease whose fence belongs to a run closed at least this long ago (database clock) is a
leftover and is deleted by the sweeper. The grace leaves the closing run the moment between its
final write and its own ``finish``, which releases the lease or hands it to the pending turn."""


def rerun_allowed(session: Session, agent_id: str, io_id: str) -> bool:
    """Whether the sweeper may trigger turn ``io_id`` again (the re-run rule, module docstring)."""
    ended = sum(1 for r in db.runs(session, agent_id, 50) if r.io_id == io_id and r.status in GAVE_UP)
    return ended <= MAX_RERUNS


def hand_on(
    sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher, lease: Lease
) -> HandOff:
    """Enqueue the ``consolidate`` run holding ``lease`` (a re-run, or a resumed pending turn).

    At-least-once safe: the lease is new (token and fence), so a second enqueue of the same lease
    at most opens the same run row again (``start_run`` is idempotent per fence).

    Returns:
        ``enqueued``, or ``deferred`` when the broker failed: then the lease was released and the
        turn's world marked not handed off (``enqueued_at`` cleared), so the sweeper triggers it.
    """
    try:
        handoff = enqueue_lease(coord, dispatcher, lease)
    except Exception as exc:  # not an InfrastructureError (e.g. Celery's own): the lease was released
        log.warning("agent %s: re-run not enqueued (%s)", lease.agent, type(exc).__name__)
        handoff = HandOff("deferred", lease=lease, error=type(exc).__name__)
    if handoff.outcome == "deferred":
        try:
            with sessions.begin() as s:
                row = db.world_by_io(s, lease.agent, lease.io)
                if row is not None:
                    row.enqueued_at = None
        except Exception as exc:  # the turn stays handed off; the agent's next turn covers it
            log.warning("agent %s: turn not marked for the sweeper (%s)", lease.agent, type(exc).__name__)
    return handoff
