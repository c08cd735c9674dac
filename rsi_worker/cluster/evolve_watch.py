"""The lease of an evolve run on the cluster, and the sweeper's watch over it
(docs/algorithm/evolve.md#lease-and-recovery).

An evolve run's chain of tasks holds a lease of the coordination protocol
(:class:`~rsi_common.coord.Lease`) under the holder id ``evolve/<name>`` — the ``/`` is not in the
id grammar (``rsi_common.boundary.check_id``), so it never names an agent. The same machinery as a
consolidation run's, not a copy:

* **Taken** by the launch (``rsi evolve run``) or the sweeper (:func:`launch`), with a new token and
  the next fence, before the first ``evolve_step`` is enqueued; the fence counter's key marks the run
  as *watched* (launched on the cluster).
* **Renewed** by every ``evolve_step`` / ``evolve_trial`` when it starts, and while a long one runs by
  the worker's heartbeat thread (:mod:`rsi_worker.cluster.heartbeat`: the tasks carry the lease as
  their ``agent``, ``token``, ``fence``, ``io`` arguments). A lease that expired while the task waited
  in the queue is taken back when nobody replaced the chain meanwhile (the fence counter still holds
  its fence). A task whose lease another chain holds (a newer fence) stops without running anything.
* **Released** when the run ends (``done``, ``stopped``, ``failed``).
* **Watched** by :func:`sweep_evolve` (one step of every sweep): a ``running``, watched run whose lease
  is gone — no task of it beat for ``lease_s`` because its step or trials died with their worker, or a
  step message was lost with no trial of its batch delivered again — gets a new lease and a new
  first step. The new chain recomputes everything from the stored rows (the engine is idempotent);
  the old chain's late tasks find their token gone and stop. Bound: ``lease_s`` +
  ``sweep_interval_s`` after the run's last task stopped beating, plus the queue wait of the new step.

``rsi evolve run --inline`` calls :func:`unwatch` first: the run leaves the sweeper's watch and a chain
still on the cluster stops at its next task.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from rsi_common.coord import Coordinator, Lease, fence_key, lease_key, pending_key
from rsi_common.db import evolve as evolve_db
from rsi_common.dispatch import TASK_EVOLVE_STEP, TASK_QUEUES, Dispatcher
from rsi_common.handoff import COORD_ERRORS

__all__ = ["HOLDER_PREFIX", "holder", "launch", "lease_args", "release", "renewed", "sweep_evolve", "unwatch"]

log = logging.getLogger(__name__)

HOLDER_PREFIX = "evolve/"
CHAIN_IO = "chain"
"""The lease's ``io`` field (a lease names the turn that started it; a chain has none)."""


def holder(name: str) -> str:
    """The lease holder id of evolve run ``name``."""
    return HOLDER_PREFIX + name


def lease_args(lease: Lease | None) -> list[Any]:
    """``[agent, token, fence, io]``: the trailing arguments of an evolve task carrying ``lease``."""
    if lease is None:
        return [None, None, None, None]
    return [lease.agent, lease.token, lease.fence, lease.io]


def _take(coord: Coordinator, name: str) -> Lease | None:
    """A new lease for the run's chain, or ``None`` while a chain holds one."""
    who = holder(name)
    if coord.lease_holder(who) is not None:
        return None
    lease = coord.try_begin(who, CHAIN_IO)
    if lease is None:  # taken in between: try_begin left a pending mark, meaningless for a chain
        coord.client.delete(pending_key(who))
    return lease


def launch(coord: Coordinator, dispatcher: Dispatcher, name: str) -> Lease | None:
    """Take the run's lease and enqueue its ``evolve_step`` carrying it; ``None`` (nothing enqueued)
    when a chain holds the lease already. If the enqueue fails the lease is released and the error
    propagates."""
    lease = _take(coord, name)
    if lease is None:
        return None
    try:
        dispatcher.enqueue(TASK_EVOLVE_STEP, [[], name, *lease_args(lease)], TASK_QUEUES[TASK_EVOLVE_STEP])
    except Exception:
        coord.delete_lease_if(lease.agent, lease.token)
        raise
    return lease


_RETAKE = """
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if cur then return 0 end
if redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  return 1
end
return 0
"""


def renewed(coord: Coordinator, lease: Lease | None) -> bool:
    """Renew a task's lease, or take it back when it expired and no newer chain was launched (the
    fence counter still holds its fence); ``True`` for a task without a lease (a step enqueued by
    hand). ``False``: the chain was replaced, the task stops."""
    if lease is None:
        return True
    keys = [lease_key(lease.agent), fence_key(lease.agent)]
    return bool(coord.client.eval(_RETAKE, 2, *keys, lease.token, str(lease.fence), coord.lease_ms))


def release(coord: Coordinator, lease: Lease | None) -> None:
    """Release the lease at the run's end (compare-and-delete: a newer chain's lease stays)."""
    if lease is not None:
        coord.delete_lease_if(lease.agent, lease.token)


def unwatch(coord: Coordinator, name: str) -> None:
    """Take the run off the sweeper's watch and end any chain of it (``rsi evolve run --inline``)."""
    who = holder(name)
    coord.client.delete(lease_key(who), fence_key(who), pending_key(who))


def _watched(coord: Coordinator, name: str) -> bool:
    return bool(coord.client.exists(fence_key(holder(name))))


def sweep_evolve(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher) -> list[str]:
    """Resume every ``running``, watched evolve run whose lease is gone (module docstring); returns
    the names of the runs resumed. Redis or broker down: nothing is resumed (the next sweep tries)."""
    with sessions() as s:
        names = evolve_db.running_evolves(s)
    resumed: list[str] = []
    for name in names:
        try:
            if _watched(coord, name) and launch(coord, dispatcher, name) is not None:
                resumed.append(name)
                log.warning("sweeper: evolve run %s: lease expired; chain resumed", name)
        except COORD_ERRORS as exc:
            log.warning("sweeper: evolve run %s deferred: Redis unavailable (%s)", name, type(exc).__name__)
            break
        except Exception:
            log.exception("sweeper: evolve run %s: resume failed", name)
    return resumed
