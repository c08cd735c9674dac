"""Re-consolidating many agents (``rsi batch``), e.g. after the model behind them changed.

A batch run of an agent is an ordinary consolidation run opened with ``force=True`` — every scored
world counts as fresh, so the run re-considers the agent's signals even when none arrived since its
last run (``rsi_worker.consolidate.opening``) — and with ``kind = "batch:<name>"`` on its run row.

**Identity and resume.** The batch's name (``--name``; by default derived from the selection, so the
same command line resumes the same batch) is its identity: the runs of kind ``batch:<name>`` are the
batch's durable record, in SQL like everything else. A later invocation with the same name does not
re-run an agent that has a finished batch run (``recorded``, ``kept``, ``failed``, ``adopted``,
``skipped``; ``failed`` is re-run with ``retry_failed``); an agent whose batch run was ``interrupted``
(or never started) is run again; a batch run still ``running`` (e.g. the cluster kept working after
the previous invocation was stopped) is waited for. Use a new name to re-consolidate everybody again
(e.g. after the next model change). Run retention (``RSI_RUN_RETENTION``) can eventually delete old
batch rows; such an agent is then run again.

**Flow per agent.** Take the agent's lease (``coord.try_begin`` for its newest turn; a held lease is
left alone and the agent is retried every ``retry_s``, so the batch does not set the pending mark of
a running run — a run that starts in the instant between the check and ``try_begin`` gets one
ordinary re-run from it, which is harmless), launch the run (:class:`CeleryLauncher`: ``send_task``
on the ``consolidate`` queue with ``force``/``kind`` keyword arguments; :class:`InlineLauncher`: in
this process), then poll SQL for the run row of that fence until it is closed (no ``.get()`` on
results). At most ``concurrency`` agents
are in flight. A run that ends ``interrupted``, a launch whose run row never appears while the lease
is gone for ``grace_s``, or a run that keeps running after its lease is gone for ``grace_s`` (its
worker died; it is closed as ``interrupted`` like the sweeper would) is retried up to ``attempts``
times. Frozen agents and agents without turns are not run.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.coord import Coordinator, Lease
from rsi_common.db import AgentRow, RunRow, WorldRow, mark_interrupted
from rsi_common.dispatch import QUEUE_CONSOLIDATE, TASK_CONSOLIDATE
from rsi_common.errors import InvalidInput, UnknownAgentError
from rsi_common.handoff import consolidate_args
from rsi_worker.consolidate import SerialExecutor, consolidate_inline
from rsi_worker.consolidate.opening import MAX_KIND_CHARS

__all__ = [
    "BATCH_PREFIX",
    "FINISHED",
    "MAX_NAME_CHARS",
    "AgentOutcome",
    "BatchReport",
    "BatchRunner",
    "CeleryLauncher",
    "InlineLauncher",
    "Launcher",
    "Selection",
    "batch_kind",
    "select_agents",
]

log = logging.getLogger(__name__)

BATCH_PREFIX = "batch:"
MAX_NAME_CHARS = MAX_KIND_CHARS - len(BATCH_PREFIX)
"""A batch name fits the run row's ``kind`` column after the prefix (26 characters)."""
FINISHED = ("recorded", "kept", "failed", "adopted", "skipped")
"""Run statuses that count as a finished batch run."""
ATTENTION = ("failed", "interrupted", "lost", "busy")
"""Outcomes that need a look (``rsi batch`` exits 1 when any agent has one)."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CHUNK = 500


def batch_kind(name: str) -> str:
    """``batch:<name>``.

    Raises:
        InvalidInput: the name is empty, too long, or has characters other than letters, digits, ``._-``.
    """
    if not (0 < len(name) <= MAX_NAME_CHARS and _NAME.fullmatch(name)):
        raise InvalidInput(f"batch name {name!r}: 1..{MAX_NAME_CHARS} letters, digits, '.', '_' or '-', "
                           "starting with a letter or digit")
    return BATCH_PREFIX + name


@dataclass(frozen=True)
class Selection:
    """Which agents a batch covers: explicit ids or all agents, optionally only those with turns
    (world ``clock``) at or after ``since``."""

    agents: tuple[str, ...] = ()
    all: bool = False
    since: datetime | None = None

    def check(self) -> None:
        """Raises ``InvalidInput`` for an empty or contradictory selection."""
        if self.agents and self.all:
            raise InvalidInput("give either --agent ids or --all, not both")
        if not (self.agents or self.all or self.since):
            raise InvalidInput("select agents with --agent (repeatable), --all or --since")

    def since_epoch(self) -> float | None:
        if self.since is None:
            return None
        since = self.since if self.since.tzinfo else self.since.replace(tzinfo=UTC)
        return since.timestamp()

    def default_name(self) -> str:
        """A name derived from the selection: ``all`` or ``ids-<8 hex of the sorted ids>``, plus
        ``-<YYYYmmddTHHMM>`` of ``since`` (UTC)."""
        if self.agents:
            digest = hashlib.sha256("\n".join(sorted(set(self.agents))).encode()).hexdigest()[:8]
            base = f"ids-{digest}"
        else:
            base = "all"
        epoch = self.since_epoch()
        if epoch is not None:
            base += "-" + datetime.fromtimestamp(epoch, UTC).strftime("%Y%m%dT%H%M")
        return base


def select_agents(session: Session, selection: Selection) -> list[str]:
    """The selected agent ids, sorted (explicit ids keep their order).

    Raises:
        UnknownAgentError: an explicit id is not stored.
    """
    selection.check()
    epoch = selection.since_epoch()
    if selection.agents:
        wanted = list(dict.fromkeys(selection.agents))
        known: set[str] = set()
        for chunk in _chunks(wanted):
            known |= set(session.execute(sa.select(AgentRow.id).where(AgentRow.id.in_(chunk))).scalars())
        missing = [a for a in wanted if a not in known]
        if missing:
            raise UnknownAgentError(f"unknown agent(s): {', '.join(repr(a) for a in missing[:10])}"
                                    + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else ""))
        if epoch is None:
            return wanted
        recent = _recent(session, epoch)
        return [a for a in wanted if a in recent]
    if epoch is None:
        return list(session.execute(sa.select(AgentRow.id).order_by(AgentRow.id)).scalars())
    return sorted(_recent(session, epoch))


def _recent(session: Session, epoch: float) -> set[str]:
    stmt = sa.select(WorldRow.agent_id).where(WorldRow.clock >= epoch).distinct()
    return set(session.execute(stmt).scalars())


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i:i + _CHUNK]


@dataclass
class AgentOutcome:
    """How one agent's part of the batch ended.

    ``status``: a run status (``adopted``, ``kept``, ``recorded``, ``failed``, ``skipped``,
    ``interrupted`` after the last attempt), or ``earlier`` (finished in an earlier invocation; its
    status is ``previous``), ``frozen``, ``no-worlds``, ``busy`` (another run held the lease for
    longer than the wait limit) or ``lost`` (the launched run never reported back).
    """

    agent_id: str
    status: str
    run_id: str | None = None
    reason: str = ""
    attempts: int = 0
    previous: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class BatchReport:
    """The outcome of every selected agent, in selection order."""

    name: str
    kind: str
    outcomes: dict[str, AgentOutcome] = field(default_factory=dict)
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes.values():
            out[o.status] = out.get(o.status, 0) + 1
        return dict(sorted(out.items()))

    @property
    def needs_attention(self) -> bool:
        return any(o.status in ATTENTION for o in self.outcomes.values())

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "agents": len(self.outcomes), "counts": self.counts(),
                "seconds": round(self.seconds, 3), "outcomes": [o.to_json() for o in self.outcomes.values()]}


class Launcher(Protocol):
    """Starts the run holding a lease; completion is observed in SQL, never through the launcher."""

    def launch(self, lease: Lease) -> None: ...

    def failure(self, agent_id: str) -> str | None:
        """Why the agent's last launch failed before its run row was written (``None``: no failure known)."""
        ...

    def close(self) -> None: ...


class CeleryLauncher:
    """Sends ``rsi.consolidate(agent, io, token, fence, force=, kind=)`` through a Celery app."""

    def __init__(self, app: Any, kind: str, *, force: bool = True) -> None:
        self.app, self.kind, self.force = app, kind, force

    def launch(self, lease: Lease) -> None:
        self.app.send_task(TASK_CONSOLIDATE, args=consolidate_args(lease),
                           kwargs={"force": self.force, "kind": self.kind}, queue=QUEUE_CONSOLIDATE,
                           ignore_result=True)  # nobody waits on it: no result subscription

    def failure(self, agent_id: str) -> str | None:
        return None

    def close(self) -> None:
        self.app.close()


class InlineLauncher:
    """Runs each agent's consolidation in this process (``rsi batch --inline``), ``concurrency``
    agents at once on a thread pool; the trials of one run go one after the other."""

    def __init__(self, deps: Any, kind: str, *, concurrency: int, force: bool = True) -> None:
        self.deps, self.kind, self.force = deps, kind, force
        self._pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="rsi-batch")
        self._futures: dict[str, Future[None]] = {}

    def launch(self, lease: Lease) -> None:
        self._futures[lease.agent] = self._pool.submit(self._run, lease)

    def _run(self, lease: Lease) -> None:
        """The agent's run and its re-runs; a failed step is settled inside (``failed``, lease
        released or handed on). What raises here is a run that could not open its row: its lease
        is released already and :meth:`failure` reports the error."""
        consolidate_inline(self.deps, lease, SerialExecutor(), force=self.force, kind=self.kind)

    def failure(self, agent_id: str) -> str | None:
        fut = self._futures.get(agent_id)
        exc = fut.exception() if fut is not None and fut.done() else None
        return None if exc is None else f"{type(exc).__name__}: {exc}"[:300]

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@contextlib.contextmanager
def _read(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """A read-only session (deferred on SQLite: polling never takes the write lock). Closing it
    ends the transaction and keeps the rows read (detached, not expired)."""
    with sessions() as s:
        s.connection(execution_options={"sqlite_begin": "DEFERRED"})
        yield s


NEWEST_WORLD = (WorldRow.clock.desc(), WorldRow.seq.desc(), WorldRow.id.desc())
"""The order of ``load_latest_worlds``: the agent's newest turn first."""


@dataclass(frozen=True)
class _Row:
    id: str
    agent_id: str
    fence: int
    status: str
    reason: str


@dataclass
class _Waiting:
    agent: str
    not_before: float = 0.0
    busy_since: float | None = None


@dataclass
class _Flight:
    agent: str
    fence: int
    started: float
    lost_since: float | None = None


class BatchRunner:
    """Runs one batch over a list of agents (module docstring).

    Args:
        sessions: the database.
        coord: the coordination protocol (the same Redis as the workers).
        launcher: starts runs.
        name: the batch's name (``kind = batch:<name>``).
        concurrency: agents in flight at once.
        attempts: launches per agent before its outcome is final (``interrupted``, ``lost``, ``failed``).
        grace_s: how long a launched run may be without its lease (not started yet, or its worker
            died) before it is given up; default ``RSI_LEASE_S``.
        wait_s: how long an agent may wait for a lease held by another run (``busy``), and how long
            a batch run may run at all; default ``RSI_RUN_STALE_S``.
        retry_s: delay before an agent whose lease was held is tried again.
        poll_s: SQL polling period while nothing changes.
        retry_failed: re-run agents whose earlier batch run ended ``failed``.
        on_outcome: called with every final :class:`AgentOutcome` (progress displays).
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        coord: Coordinator,
        launcher: Launcher,
        *,
        name: str,
        concurrency: int = 4,
        attempts: int = 3,
        grace_s: float = 60.0,
        wait_s: float = 900.0,
        retry_s: float = 1.0,
        poll_s: float = 0.2,
        retry_failed: bool = False,
        on_outcome: Callable[[AgentOutcome], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if concurrency < 1 or attempts < 1:
            raise InvalidInput("concurrency and attempts must be >= 1")
        self.sessions, self.coord, self.launcher = sessions, coord, launcher
        self.name, self.kind = name, batch_kind(name)
        self.concurrency, self.attempts = concurrency, attempts
        self.grace_s, self.wait_s, self.retry_s, self.poll_s = grace_s, wait_s, retry_s, poll_s
        self.retry_failed = retry_failed
        self.on_outcome = on_outcome
        self.clock, self.sleep = clock, sleep
        self.report = BatchReport(name, self.kind)
        self._queue: deque[_Waiting] = deque()
        self._flights: dict[str, _Flight] = {}
        self._tries: dict[str, int] = {}

    # --- the loop ----------------------------------------------------------------------------------

    def run(self, agents: Sequence[str]) -> BatchReport:
        """Run the batch over ``agents`` until every one has an outcome; returns the report."""
        t0 = self.clock()
        for a in agents:
            self.report.outcomes.setdefault(a, AgentOutcome(a, "pending"))
        self._plan(list(self.report.outcomes))
        while self._queue or self._flights:
            started = self._fill()
            changed = self._poll()
            if not (started or changed):
                self.sleep(self.poll_s)
        self.report.seconds = self.clock() - t0
        return self.report

    def _done(self, agent: str, status: str, run_id: str | None = None, reason: str = "",
              previous: str | None = None) -> None:
        self._flights.pop(agent, None)
        outcome = AgentOutcome(agent, status, run_id, reason or "", self._tries.get(agent, 0), previous)
        self.report.outcomes[agent] = outcome
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    def _plan(self, agents: list[str]) -> None:
        """Resume: agents with a finished batch run are done; running ones are watched; others queue."""
        rows: dict[str, list[_Row]] = {}
        for r in self._rows(agents):
            rows.setdefault(r.agent_id, []).append(r)
        now = self.clock()
        for agent in agents:
            mine = rows.get(agent, [])
            done = [r for r in mine if r.status in FINISHED
                    and not (self.retry_failed and r.status == "failed")]
            running = [r for r in mine if r.status == "running"]
            if done:
                last = done[-1]
                self._done(agent, "earlier", last.id, last.reason, previous=last.status)
            elif running:
                self._flights[agent] = _Flight(agent, running[-1].fence, now)
            else:
                self._queue.append(_Waiting(agent))

    def _fill(self) -> bool:
        """Start ready agents while fewer than ``concurrency`` are in flight; True if any started."""
        started = False
        for _ in range(len(self._queue)):
            if len(self._flights) >= self.concurrency:
                break
            item = self._queue.popleft()
            if item.not_before > self.clock():
                self._queue.append(item)
                continue
            started |= self._start(item)
        return started

    # --- starting one agent ------------------------------------------------------------------------

    def _start(self, item: _Waiting) -> bool:
        agent, now = item.agent, self.clock()
        with _read(self.sessions) as s:
            frozen = s.execute(sa.select(AgentRow.frozen).where(AgentRow.id == agent)).scalar_one_or_none()
            io = s.execute(sa.select(WorldRow.io_id).where(WorldRow.agent_id == agent)
                           .order_by(*NEWEST_WORLD).limit(1)).scalar_one_or_none()
        if frozen is None:
            self._done(agent, "failed", reason=f"unknown agent {agent!r}")
            return True
        if frozen or io is None:
            self._done(agent, "frozen" if frozen else "no-worlds",
                       reason="the agent is frozen" if frozen else "the agent has no recorded turns")
            return True
        lease = self.coord.try_begin(agent, io) if self.coord.lease_holder(agent) is None else None
        if lease is None:  # a run holds the lease: try again later (never set its pending mark on purpose)
            busy_since = item.busy_since if item.busy_since is not None else now
            if now - busy_since > self.wait_s:
                self._done(agent, "busy", reason=f"another run held the lease for {now - busy_since:.0f} s")
                return True
            self._queue.append(_Waiting(agent, now + self.retry_s, busy_since))
            return False
        self._tries[agent] = self._tries.get(agent, 0) + 1
        try:
            self.launcher.launch(lease)
        except Exception as exc:
            self.coord.delete_lease_if(agent, lease.token)
            self._retry_or(agent, "failed", None, f"launch failed: {type(exc).__name__}: {exc}"[:300])
            return True
        self._flights[agent] = _Flight(agent, lease.fence, now)
        return True

    def _retry_or(self, agent: str, status: str, run_id: str | None, reason: str) -> None:
        """Queue the agent again if attempts remain, else give it ``status``."""
        self._flights.pop(agent, None)
        if self._tries.get(agent, 0) < self.attempts:
            log.info("batch %s: %s retried (%s)", self.name, agent, reason)
            self._queue.append(_Waiting(agent, self.clock() + self.retry_s))
        else:
            self._done(agent, status, run_id, reason)

    # --- watching runs -----------------------------------------------------------------------------

    def _poll(self) -> bool:
        """Read the in-flight agents' batch rows once; True if any flight ended or was requeued."""
        if not self._flights:
            return False
        found = {(r.agent_id, r.fence): r for r in self._rows(list(self._flights))}
        changed = False
        for flight in list(self._flights.values()):
            row = found.get((flight.agent, flight.fence))
            if row is not None and row.status in FINISHED:
                self._done(flight.agent, row.status, row.id, row.reason)
            elif row is not None and row.status == "interrupted":
                self._retry_or(flight.agent, "interrupted", row.id, row.reason or "interrupted")
            elif not self._watch(flight, row):
                continue
            changed = True
        return changed

    def _rows(self, agents: list[str]) -> list[_Row]:
        """The batch's run rows of ``agents`` (the columns the loop needs, oldest first)."""
        out: list[_Row] = []
        cols = (RunRow.id, RunRow.agent_id, RunRow.fence, RunRow.status, RunRow.reason)
        with _read(self.sessions) as s:
            for chunk in _chunks(agents):
                stmt = sa.select(*cols).where(RunRow.kind == self.kind, RunRow.agent_id.in_(chunk))
                for r in s.execute(stmt.order_by(RunRow.started_at, RunRow.id)):
                    out.append(_Row(r.id, r.agent_id, int(r.fence or 0), r.status, r.reason or ""))
        return out

    def _watch(self, flight: _Flight, row: _Row | None) -> bool:
        """A flight without a closed row: give it up when its lease is gone for ``grace_s`` or it
        exceeded ``wait_s``. True if the flight ended or was requeued."""
        now, agent = self.clock(), flight.agent
        failure = self.launcher.failure(agent) if row is None else None
        if failure is not None:
            self._retry_or(agent, "failed", None, failure)
            return True
        holder = self.coord.lease_holder(agent)
        if holder is not None and holder.fence == flight.fence:
            flight.lost_since = None
        elif flight.lost_since is None:
            flight.lost_since = now
        lost = flight.lost_since is not None and now - flight.lost_since > self.grace_s
        overdue = now - flight.started > self.wait_s
        if not (lost or overdue):
            return False
        reason = "lease lost (batch)" if lost else f"no result after {self.wait_s:.0f} s (batch)"
        if row is None:
            self._retry_or(agent, "lost", None, reason)
            return True
        with self.sessions.begin() as s:
            mark_interrupted(s, [row.id], reason)
        return False  # the next poll sees the row interrupted (or closed meanwhile by its own run)
