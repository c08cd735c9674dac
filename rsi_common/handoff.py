"""Hand a turn's consolidation trigger to the cluster (docs/algorithm/consolidation.md §3.12.1-3), shared by
the host client
and the sweeper.

A trigger is ``coord.try_begin(agent, io)``: a :class:`~rsi_common.coord.Lease` → enqueue
``consolidate(agent, io, token, fence)`` on the ``consolidate`` queue; ``None`` → the pending mark
now holds ``io`` (the running run's ``finish`` starts one re-run). Either way the trigger was
*handed off*. When Redis or the broker cannot be reached the trigger is **deferred**: nothing is
raised, a lease taken for the failed enqueue is released at once (compare-and-delete), and the
caller leaves the world's ``enqueued_at`` empty so the sweeper triggers it again.

``try_begin`` is sent on the coordinator's wire (:func:`rsi_common.coord_wire.try_begin`: a kept
connection, redis-py's call on a dropped one; docs/performance/record-path.md#the-hand-off-on-the-wire).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import redis

from rsi_common.coord import Coordinator, Lease
from rsi_common.coord_wire import try_begin as wire_try_begin
from rsi_common.dispatch import QUEUE_CONSOLIDATE, TASK_CONSOLIDATE, Dispatcher
from rsi_common.errors import InfrastructureError

__all__ = ["COORD_ERRORS", "HandOff", "consolidate_args", "enqueue_lease", "trigger_consolidation"]

log = logging.getLogger(__name__)

COORD_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
"""Errors of an unreachable or failing Redis (real or fakeredis)."""


@dataclass(frozen=True)
class HandOff:
    """What became of one trigger.

    Attributes:
        outcome: ``enqueued`` (a run was enqueued with a fresh lease), ``pending`` (a run holds the
            lease; the pending mark holds the io) or ``deferred`` (Redis or the broker failed).
        task_id: the Celery task id when enqueued.
        lease: the lease of the enqueued run (or of the failed enqueue, already released).
        error: exception class name when deferred.
    """

    outcome: Literal["enqueued", "pending", "deferred"]
    task_id: str | None = None
    lease: Lease | None = None
    error: str = ""

    @property
    def handed_off(self) -> bool:
        """True unless deferred."""
        return self.outcome != "deferred"


def consolidate_args(lease: Lease) -> list[str | int]:
    """Arguments of the ``consolidate`` task: ``[agent_id, io_id, token, fence]``."""
    return [lease.agent, lease.io, lease.token, lease.fence]


def enqueue_lease(coord: Coordinator, dispatcher: Dispatcher, lease: Lease) -> HandOff:
    """Enqueue the ``consolidate`` run that holds ``lease``.

    On an infrastructure failure (broker down) the lease is released if it is still ours, so the
    agent is not blocked for ``lease_s``; a failing release is logged (the lease then expires).

    Returns:
        ``enqueued`` with the task id, or ``deferred``.

    Raises:
        Exception: anything that is not an infrastructure failure (a bug), after the release.
    """
    try:
        task_id = dispatcher.enqueue(TASK_CONSOLIDATE, consolidate_args(lease), QUEUE_CONSOLIDATE)
    except BaseException as exc:
        _release(coord, lease)
        if not isinstance(exc, InfrastructureError):
            raise
        log.warning("consolidation of agent %s deferred: broker unavailable (%s)", lease.agent,
                    type(exc).__name__)
        return HandOff("deferred", lease=lease, error=type(exc).__name__)
    return HandOff("enqueued", task_id=task_id, lease=lease)


def _release(coord: Coordinator, lease: Lease) -> None:
    try:
        coord.delete_lease_if(lease.agent, lease.token)
    except COORD_ERRORS as exc:
        log.warning("agent %s: could not release the lease of a failed enqueue (%s); it expires by itself",
                    lease.agent, type(exc).__name__)


def trigger_consolidation(coord: Coordinator, dispatcher: Dispatcher, agent_id: str, io_id: str) -> HandOff:
    """Trigger a consolidation of ``agent_id`` for turn ``io_id`` (docs/algorithm/consolidation.md §3.12.1).
    Never raises for an
    unreachable Redis or broker (the outcome is ``deferred``; a warning names the agent only).

    Idempotency: a second trigger for the same turn at most causes one more run, which finds no
    fresh signal and ends ``recorded``.
    """
    try:
        lease = wire_try_begin(coord, agent_id, io_id)  # coord.try_begin on a kept connection
    except COORD_ERRORS as exc:
        log.warning("consolidation of agent %s deferred: Redis unavailable (%s)", agent_id,
                    type(exc).__name__)
        return HandOff("deferred", error=type(exc).__name__)
    if lease is None:
        return HandOff("pending")
    return enqueue_lease(coord, dispatcher, lease)
