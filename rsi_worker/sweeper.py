"""The sweeper (SPEC §3.12.3, ARCHITECTURE §3) as a plain function; the Celery beat task calls it
every ``sweep_interval_s``.

One :func:`sweep` does, in order:

1. **Stale runs.** Every ``running`` run whose lease expired — the agent's lease is gone, or held
   by another fence (:meth:`~rsi_common.coord.Coordinator.lease_holder`) — or whose ``started_at`` is
   older than ``run_stale_s`` by the database clock, is closed as ``interrupted`` (reason ``lease
   expired`` or ``stale``; the conditional update leaves a run that finished meanwhile alone). Its
   lease is deleted if the token still matches (compare-and-delete), and the agent's pending io,
   if any, is begun (``begin_pending``) and enqueued. If that enqueue fails, the lease is released
   and the pending turn's world gets ``enqueued_at`` cleared, so step 2 retries it next sweep.
   Without a pending turn, the interrupted run's own turn is triggered again (its work was lost,
   e.g. to a Redis restart), unless that turn already has ``MAX_RERUNS`` interrupted runs (a run
   that keeps dying is not retried for ever; the agent's next turn triggers it again).
2. **Worlds never handed off** (saved while Redis or the broker was down): worlds with no
   ``enqueued_at`` older than ``grace_s`` (database clock). Per agent, the newest is triggered
   (``try_begin`` → enqueue, or the pending mark) and all of them are marked; a frozen agent's are
   marked without a trigger; a deferred trigger leaves them for the next sweep.

Idempotent: a second sweep right after finds nothing to do (asserted by the tests). Safe to run
concurrently with itself and with runs (every write is conditional or compare-and-set). Redis
down: step 1 closes only runs that are stale by age and triggers nothing; step 2 defers.

Known limit (documented decision): a pending mark left by a run that died *before* creating its
run row (its task message was lost by the broker) is not found here; the agent's next turn or
signal triggers it.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.config import Settings
from rsi_common.coord import Coordinator, LeaseHolder
from rsi_common.dispatch import Dispatcher
from rsi_common.handoff import COORD_ERRORS, enqueue_lease, trigger_consolidation

__all__ = ["LEASE_EXPIRED_REASON", "STALE_REASON", "SweepReport", "sweep"]

log = logging.getLogger(__name__)

LEASE_EXPIRED_REASON = "lease expired"
STALE_REASON = "stale: running longer than run_stale_s"
MAX_RERUNS = 3


@dataclass
class SweepReport:
    """Counts of what one sweep did (exported as metrics by the beat task).

    Attributes:
        runs_checked: ``running`` runs looked at.
        lease_expired: runs closed as ``interrupted`` because their lease expired.
        stale: runs closed as ``interrupted`` because they ran longer than ``run_stale_s``.
        leases_deleted: leases of closed runs deleted (the closed run still held them).
        pending_enqueued: pending turns of closed runs begun and enqueued.
        reruns: closed runs re-run for their own turn (no pending turn; at most
            ``MAX_RERUNS`` interrupted runs per turn).
        worlds_found: worlds never handed off, past the grace period.
        agents_triggered: agents whose newest such world was handed off (enqueued or pending).
        pending_marked: of those, hand-offs that found the lease held (the pending mark was set).
        worlds_marked: worlds marked handed off (including a frozen agent's).
        frozen_marked: worlds of frozen agents marked without a trigger.
        enqueued: ``consolidate`` tasks enqueued in total.
        deferred: hand-offs that failed (Redis or broker down); retried next sweep.
        errors: unexpected failures (logged); the sweep went on with the next agent.
        redis_ok: Redis answered the lease checks.
    """

    runs_checked: int = 0
    lease_expired: int = 0
    stale: int = 0
    leases_deleted: int = 0
    pending_enqueued: int = 0
    reruns: int = 0
    worlds_found: int = 0
    agents_triggered: int = 0
    pending_marked: int = 0
    worlds_marked: int = 0
    frozen_marked: int = 0
    enqueued: int = 0
    deferred: int = 0
    errors: int = 0
    redis_ok: bool = True

    @property
    def actions(self) -> int:
        """Everything the sweep changed (0 for a sweep with nothing to do)."""
        return (self.lease_expired + self.stale + self.leases_deleted + self.enqueued
                + self.agents_triggered + self.worlds_marked)

    def to_json(self) -> dict[str, Any]:
        """The counts as a JSON object."""
        return asdict(self)


def sweep(
    sessions: sessionmaker[Session],
    coord: Coordinator,
    dispatcher: Dispatcher,
    settings: Settings,
    *,
    grace_s: float = 60.0,
    limit: int = 1000,
) -> SweepReport:
    """Run one sweep (module docstring).

    Args:
        sessions: session factory of the durable state.
        coord: the coordination protocol.
        dispatcher: where ``consolidate`` tasks go.
        settings: ``run_stale_s`` is read.
        grace_s: a world saved less than this many seconds ago (database clock) is left to its
            ``record_turn``, which may still be handing it off.
        limit: at most this many un-handed-off worlds are looked at per sweep.

    Returns:
        The :class:`SweepReport`.
    """
    report = SweepReport()
    _close_stale_runs(sessions, coord, dispatcher, settings, report)
    _trigger_unenqueued(sessions, coord, dispatcher, report, grace_s=grace_s, limit=limit)
    return report


def _holders(coord: Coordinator, agents: set[str], report: SweepReport) -> dict[str, LeaseHolder | None]:
    holders: dict[str, LeaseHolder | None] = {}
    try:
        for agent in sorted(agents):
            holders[agent] = coord.lease_holder(agent)
    except COORD_ERRORS as exc:
        report.redis_ok = False
        log.warning("sweeper: Redis unavailable (%s); closing runs by age only", type(exc).__name__)
        return {}
    return holders


def _close_stale_runs(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher,
                      settings: Settings, report: SweepReport) -> None:
    with sessions.begin() as s:
        running = [(r.id, r.agent_id, r.fence) for r in db.running_runs(s)]
        ios = {r.id: r.io_id for r in db.running_runs(s)}
    report.runs_checked = len(running)
    if not running:
        return
    holders = _holders(coord, {agent for _, agent, _ in running}, report)
    expired = []
    if report.redis_ok:
        for run_id, agent, fence in running:
            holder = holders.get(agent)
            if holder is None or holder.fence != fence:
                expired.append(run_id)
    with sessions.begin() as s:
        stale = db.stale_runs(s, expired, settings.run_stale_s)
        lost = set(expired)
        by_lease = [r.id for r in stale if r.id in lost]
        by_age = [r.id for r in stale if r.id not in lost]
        closed_lease = db.mark_interrupted(s, by_lease, LEASE_EXPIRED_REASON)
        closed_age = db.mark_interrupted(s, by_age, STALE_REASON)
    report.lease_expired += len(closed_lease)
    report.stale += len(closed_age)
    closed = set(closed_lease) | set(closed_age)
    if not closed or not report.redis_ok:
        return
    fences: dict[str, list[int]] = defaultdict(list)
    last_io: dict[str, str | None] = {}
    for run_id, agent, fence in sorted(running, key=lambda r: r[2] or 0):
        if run_id in closed and fence is not None:
            fences[agent].append(fence)
            last_io[agent] = ios.get(run_id)
    for agent, agent_fences in sorted(fences.items()):
        resume = functools.partial(_release_and_resume, sessions, coord, dispatcher, agent, agent_fences,
                                   last_io.get(agent), report)
        _guarded(report, agent, resume)


def _guarded(report: SweepReport, agent: str, step: Callable[[], None]) -> None:
    """Run one agent's step; a failure is counted and logged, and the sweep goes on."""
    try:
        step()
    except COORD_ERRORS as exc:
        report.deferred += 1
        log.warning("sweeper: agent %s deferred: Redis unavailable (%s)", agent, type(exc).__name__)
    except Exception:
        report.errors += 1
        log.exception("sweeper: agent %s failed", agent)


def _rerun(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher, agent: str,
           io: str | None, report: SweepReport) -> None:
    """Trigger a closed run's own turn again, unless it was interrupted ``MAX_RERUNS`` times."""
    if not io:
        return
    with sessions.begin() as s:
        tries = sum(1 for r in db.runs(s, agent, 50) if r.io_id == io and r.status == "interrupted")
    if tries > MAX_RERUNS:
        return
    handoff = trigger_consolidation(coord, dispatcher, agent, io)
    if handoff.outcome == "enqueued":
        report.enqueued += 1
        report.reruns += 1
    elif not handoff.handed_off:
        report.deferred += 1


def _release_and_resume(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher,
                        agent: str, fences: list[int], io: str | None, report: SweepReport) -> None:
    holder = coord.lease_holder(agent)
    if holder is not None and holder.fence in fences and coord.delete_lease_if(agent, holder.token):
        report.leases_deleted += 1
    lease = coord.begin_pending(agent)
    if lease is None:
        _rerun(sessions, coord, dispatcher, agent, io, report)
        return
    handoff = enqueue_lease(coord, dispatcher, lease)
    if handoff.outcome == "enqueued":
        report.enqueued += 1
        report.pending_enqueued += 1
        return
    report.deferred += 1
    with sessions.begin() as s:  # the pending mark is gone: let step 2 retry the turn next sweep
        row = db.world_by_io(s, agent, lease.io)
        if row is not None:
            row.enqueued_at = None


def _trigger_unenqueued(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher,
                        report: SweepReport, *, grace_s: float, limit: int) -> None:
    with sessions.begin() as s:
        rows = db.unenqueued_worlds(s, grace_s=grace_s, limit=limit)
        by_agent: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for row in rows:  # ordered by agent, then oldest first: the last one is the newest
            by_agent[row.agent_id].append((row.id, row.io_id))
        frozen = {agent: db.get_agent(s, agent).frozen for agent in by_agent}
    report.worlds_found = len(rows)
    for agent, worlds in sorted(by_agent.items()):
        _guarded(report, agent, functools.partial(
            _trigger_agent, sessions, coord, dispatcher, agent, worlds, frozen[agent], report))


def _trigger_agent(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher, agent: str,
                   worlds: list[tuple[str, str]], frozen: bool, report: SweepReport) -> None:
    ids = [world_id for world_id, _ in worlds]
    if not frozen:
        handoff = trigger_consolidation(coord, dispatcher, agent, worlds[-1][1])
        if not handoff.handed_off:
            report.deferred += 1
            return
        report.agents_triggered += 1
        report.enqueued += handoff.outcome == "enqueued"
        report.pending_marked += handoff.outcome == "pending"
    with sessions.begin() as s:
        marked = db.mark_enqueued(s, ids)
    report.worlds_marked += marked
    if frozen:
        report.frozen_marked += marked
