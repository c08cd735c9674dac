"""The sweeper (docs/algorithm/consolidation.md §3.12.3, docs/protocol.md#redis-key-protocol) as a plain
function; the Celery beat task calls it
every ``sweep_interval_s``. What each step recovers from: ``docs/operations/failure-recovery.md``.

One :func:`sweep` does, in order:

1. **Stale runs.** Every ``running`` run whose lease expired — the agent's lease is gone, or held
   by another fence (:meth:`~rsi_common.coord.Coordinator.lease_holder`) — or whose ``started_at`` is
   older than ``run_stale_s`` by the database clock, is closed as ``interrupted`` (reason ``lease
   expired`` or ``stale``; the conditional update leaves a run that finished meanwhile alone). Its
   lease is deleted if the token still matches (compare-and-delete), and the agent's pending io,
   if any, is begun (``begin_pending``) and enqueued (:func:`~rsi_worker.cluster.recovery.hand_on`: if that
   enqueue fails, the lease is released and the pending turn's world gets ``enqueued_at`` cleared,
   so step 4 retries it next sweep). Without a pending turn, the interrupted run's own turn is
   triggered again (its work was lost, e.g. to a Redis restart) as the re-run rule allows
   (:func:`~rsi_worker.cluster.recovery.rerun_allowed`: a turn whose runs keep dying is not retried for ever).
2. **Leftover leases.** Every lease (``SCAN rsi:*:lease``) whose fence has no ``running`` run: when
   the fence's run is closed — for at least :data:`~rsi_worker.cluster.recovery.CLOSED_LEASE_GRACE_S` — or
   the key has no expiry, the lease is deleted (compare-and-delete by token) and the agent's pending
   turn, if any, is begun and enqueued. A lease whose fence has **no run row yet** is left alone:
   it belongs to a ``consolidate`` task still waiting in the queue, which opens its row when it
   starts; its grace period is its own TTL (``lease_s``), after which it is gone and step 3 finds
   what it left.
3. **Orphaned pending marks.** Every pending mark (``SCAN rsi:*:pending``) of an agent with no lease
   and no ``running`` run — left when a lease expired or was released while a turn was pending —
   is begun (``begin_pending``, atomic: it fails if a lease was taken meanwhile) and enqueued: one
   run for the pending turn.
4. **Worlds never handed off** (saved while Redis or the broker was down): worlds with no
   ``enqueued_at`` older than ``grace_s`` (database clock). Per agent, the newest is triggered
   (``try_begin`` → enqueue, or the pending mark) and all of them are marked; a frozen agent's are
   marked without a trigger; a deferred trigger leaves them for the next sweep.
5. **Evolve runs** whose chain stopped beating (:func:`~rsi_worker.cluster.evolve_watch.sweep_evolve`):
   a new lease and a new first step.

Idempotent: a second sweep right after finds nothing to do (asserted by the tests): every lease it
creates belongs to a queued task (step 2 leaves it) and every pending mark it begins is consumed.
Safe to run concurrently with itself and with runs (every write is conditional or compare-and-set).
Redis down: step 1 closes only runs that are stale by age and triggers nothing; steps 2–3 are
skipped; step 4 defers.
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
from rsi_common.handoff import COORD_ERRORS, trigger_consolidation
from rsi_worker.cluster.evolve_watch import sweep_evolve
from rsi_worker.cluster.recovery import CLOSED_LEASE_GRACE_S, MAX_RERUNS, hand_on, rerun_allowed

__all__ = ["LEASE_EXPIRED_REASON", "MAX_RERUNS", "STALE_REASON", "SweepReport", "sweep"]

log = logging.getLogger(__name__)

LEASE_EXPIRED_REASON = "lease expired"
STALE_REASON = "stale: running longer than run_stale_s"


@dataclass
class SweepReport:
    """Counts of what one sweep did (exported as metrics by the beat task).

    Attributes:
        runs_checked: ``running`` runs looked at.
        lease_expired: runs closed as ``interrupted`` because their lease expired.
        stale: runs closed as ``interrupted`` because they ran longer than ``run_stale_s``.
        leases_deleted: leases of closed runs deleted (the closed run still held them).
        pending_enqueued: pending turns begun and enqueued (of closed runs, leftover leases, orphaned marks).
        reruns: closed runs re-run for their own turn (no pending turn; the re-run rule of
            :mod:`rsi_worker.cluster.recovery`).
        leases_checked: leases looked at (step 2).
        leftover_leases: leases deleted because their run was closed (or the key never expired).
        pending_checked: pending marks looked at (step 3).
        orphaned_pending: pending marks of agents without lease or running run, begun (one run each).
        worlds_found: worlds never handed off, past the grace period.
        agents_triggered: agents whose newest such world was handed off (enqueued or pending).
        pending_marked: of those, hand-offs that found the lease held (the pending mark was set).
        worlds_marked: worlds marked handed off (including a frozen agent's).
        frozen_marked: worlds of frozen agents marked without a trigger.
        enqueued: ``consolidate`` tasks enqueued in total.
        deferred: hand-offs that failed (Redis or broker down); retried next sweep.
        errors: unexpected failures (logged); the sweep went on with the next agent.
        redis_ok: Redis answered the lease checks.
        evolve_resumed: evolve runs whose lease expired, given a new chain (step 5).
    """

    runs_checked: int = 0
    lease_expired: int = 0
    stale: int = 0
    leases_deleted: int = 0
    pending_enqueued: int = 0
    reruns: int = 0
    leases_checked: int = 0
    leftover_leases: int = 0
    pending_checked: int = 0
    orphaned_pending: int = 0
    worlds_found: int = 0
    agents_triggered: int = 0
    pending_marked: int = 0
    worlds_marked: int = 0
    frozen_marked: int = 0
    enqueued: int = 0
    deferred: int = 0
    errors: int = 0
    redis_ok: bool = True
    evolve_resumed: int = 0

    @property
    def actions(self) -> int:
        """Everything the sweep changed (0 for a sweep with nothing to do)."""
        return (self.lease_expired + self.stale + self.leases_deleted + self.enqueued
                + self.agents_triggered + self.worlds_marked + self.leftover_leases + self.orphaned_pending
                + self.evolve_resumed)

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
    if report.redis_ok:
        _sweep_keys(sessions, coord, dispatcher, report)
    _trigger_unenqueued(sessions, coord, dispatcher, report, grace_s=grace_s, limit=limit)
    if report.redis_ok:
        report.evolve_resumed = len(sweep_evolve(sessions, coord, dispatcher))
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
    """Trigger a closed run's own turn again, as the re-run rule allows."""
    if not io:
        return
    with sessions.begin() as s:
        allowed = rerun_allowed(s, agent, io)
    if not allowed:
        return
    handoff = trigger_consolidation(coord, dispatcher, agent, io)
    if handoff.outcome == "enqueued":
        report.enqueued += 1
        report.reruns += 1
    elif not handoff.handed_off:
        report.deferred += 1


def _resume_pending(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher, agent: str,
                    report: SweepReport) -> str | None:
    """Begin and enqueue the agent's pending turn if its lease is free: ``enqueued``, ``deferred``
    (the world is marked not handed off, so step 4 retries it) or ``None`` (nothing begun)."""
    lease = coord.begin_pending(agent)
    if lease is None:
        return None
    outcome = hand_on(sessions, coord, dispatcher, lease).outcome
    if outcome == "enqueued":
        report.enqueued += 1
        report.pending_enqueued += 1
    else:
        report.deferred += 1
    return outcome


def _release_and_resume(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher,
                        agent: str, fences: list[int], io: str | None, report: SweepReport) -> None:
    holder = coord.lease_holder(agent)
    if holder is not None and holder.fence in fences and coord.delete_lease_if(agent, holder.token):
        report.leases_deleted += 1
    if _resume_pending(sessions, coord, dispatcher, agent, report) is None:
        _rerun(sessions, coord, dispatcher, agent, io, report)


def _sweep_keys(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher,
                report: SweepReport) -> None:
    """Steps 2 and 3 (module docstring), agent by agent; a failure defers that agent only."""
    try:
        leased = sorted(set(coord.agents_with("lease")))
    except COORD_ERRORS as exc:
        report.redis_ok = False
        log.warning("sweeper: Redis unavailable (%s); leases not checked", type(exc).__name__)
        return
    report.leases_checked = len(leased)
    for agent in leased:
        _guarded(report, agent, functools.partial(_check_lease, sessions, coord, dispatcher, agent, report))
    try:
        pending = sorted({*coord.agents_with("pending"), *coord.agents_with("pending_refine")})
    except COORD_ERRORS as exc:
        report.redis_ok = False
        log.warning("sweeper: Redis unavailable (%s); pending marks not checked", type(exc).__name__)
        return
    report.pending_checked = len(pending)
    for agent in pending:
        _guarded(report, agent, functools.partial(_check_pending, sessions, coord, dispatcher, agent, report))


def _check_lease(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher, agent: str,
                 report: SweepReport) -> None:
    """Step 2 for one agent: delete a leftover lease (its run closed, or no expiry), resume pending."""
    holder = coord.lease_holder(agent)
    if holder is None:
        return
    with sessions.begin() as s:
        state = db.fence_status(s, agent, holder.fence, closed_for_s=CLOSED_LEASE_GRACE_S)
    if state is None:  # no row yet: a queued task's lease; its TTL is its grace period
        leftover = coord.lease_ttl_ms(agent) == -1
    else:
        status, closed_long_ago = state
        leftover = status != "running" and closed_long_ago
    if leftover and coord.delete_lease_if(agent, holder.token):
        report.leftover_leases += 1
        log.warning("sweeper: agent %s: leftover lease of fence %d deleted", agent, holder.fence)
        _resume_pending(sessions, coord, dispatcher, agent, report)


def _check_pending(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher, agent: str,
                   report: SweepReport) -> None:
    """Step 3 for one agent: a pending mark nobody will take (no lease, no running run) is begun."""
    if coord.lease_holder(agent) is not None:
        return  # the holder's finish takes the pending turn (or step 2 / its TTL frees the lease)
    with sessions.begin() as s:
        if db.running_runs(s, agent):
            return  # step 1 of this or the next sweep closes it and resumes the pending turn
    if _resume_pending(sessions, coord, dispatcher, agent, report) is not None:
        report.orphaned_pending += 1
        log.warning("sweeper: agent %s: orphaned pending turn begun", agent)


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
