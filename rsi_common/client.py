"""Host API (docs/algorithm/consolidation.md §3.12): record turns and signals, read the current harness,
manage versions.

Usage::

    client = RsiClient(Settings())                  # cheap: no connection is opened here
    harness = client.current_harness("agent-1")     # cached; pub/sub invalidation
    result = run_turn(plan, harness, model)         # or: client.run_turn("agent-1", plan, model)
    client.record_turn("agent-1", result)           # stores, then triggers consolidation
    client.close()

**The turn never waits.** :meth:`RsiClient.record_turn` stores the world in SQL first (the durable
truth), then hands the trigger to Redis and the broker, each with a short timeout (1 s). If either
is down, no exception reaches the host: a warning names the agent (never the world), the world stays
un-enqueued and the sweeper (``rsi_worker.cluster.sweeper``) triggers it later. Database errors do raise
(``sqlalchemy.exc.SQLAlchemyError``): nothing could be stored.

**Thread safety.** One client per process, shared by every thread: the engine, the Redis client and
the dispatcher pool their connections; the harness cache is locked. Not fork-safe: create the client
after forking (or :meth:`RsiClient.close` it before). Objects passed in (engine, Redis client,
dispatcher) are used, never closed; objects the client built from the settings are closed by
:meth:`RsiClient.close`.

The database schema must be current (``rsi db upgrade``); the client never migrates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from rsi_common import db
from rsi_common.boundary import MAX_HARNESS_VERSION_CHARS, check_id, check_label
from rsi_common.config import Settings
from rsi_common.coord import Coordinator
from rsi_common.credentials import describe, find_in, safe_repr
from rsi_common.db.lean_tx import lean_begin
from rsi_common.db.record import (
    RETENTION_EVERY,
    mark_handed_off,
    record_bare_turn,
    record_world_turn,
    unmarked,
    warm_record_path,
)
from rsi_common.dispatch import Dispatcher, KombuDispatcher, redis_py_url
from rsi_common.errors import CredentialError, InvalidInput, SettingsError, TurnNotStored
from rsi_common.handoff import COORD_ERRORS, trigger_consolidation
from rsi_common.harness import H0_VERSION, Harness, diff_trees, h0, materialize, resolve_harness, workspace_of
from rsi_common.harness.bundled import HarnessLabel
from rsi_common.harness.checkpoint import Checkpoint, checkpoint_json
from rsi_common.host_input import ParsedTurn, check_plan, check_signals, parse_turn
from rsi_common.invalidation import HarnessCache, InvalidationListener
from rsi_common.kernel import EventSink, RetryPolicy, TurnPlan, TurnResult, run_turn
from rsi_common.llm import ModelClient
from rsi_common.record_retry import HANDOFF_BUDGET_S, RetryBudget, retry_write
from rsi_common.stored import safe_reason

__all__ = [
    "CANCELLED_NOT_RECORDED",
    "MARK_DELAY_S",
    "OWN_LOOP_REASON",
    "REDIS_TIMEOUT_S",
    "TRAJECTORY_RETENTION",
    "AgentInfo",
    "Dispatched",
    "RecordedTurn",
    "RsiClient",
    "RunInfo",
    "VersionInfo",
    "redis_client",
]

log = logging.getLogger(__name__)

Dispatched = Literal["enqueued", "pending", "deferred", "frozen", "skipped", "off"]
CANCELLED_NOT_RECORDED = "not recorded: the turn was cancelled"
"""``record_error`` of a cancelled turn (nothing of it is stored)."""
OWN_LOOP_REASON = "provider runs its own loop"
"""Reason of the ``skipped`` run row of an own-loop turn (docs/algorithm/consolidation.md §3.12.4)."""
TRAJECTORY_RETENTION = 1_000
"""Trajectory rows kept per agent (project decision; the spec sets no bound)."""
REDIS_TIMEOUT_S = 1.0
"""Connect and socket timeout, in seconds, of the Redis client the client builds itself."""
MARK_DELAY_S = 1.0
"""Longest wait, in seconds, of a hand-off mark (``enqueued_at``) before it is written: marks ride
on the client's next record transaction or, when the client is idle, on one flush by a background
thread (docs/performance/record-path.md). Far below the sweeper's grace (60 s)."""
MARK_BATCH = 256
"""Pending marks that make a flush due at once, whatever their age."""


class _Marks:
    """World ids whose trigger was handed off, waiting to have ``enqueued_at`` written.

    A mark is due when the oldest pending one is ``delay_s`` old or ``batch`` are pending. Due marks
    ride on the next record transaction (:meth:`take`); a daemon thread flushes them when no record
    transaction comes (started with the first mark, stopped by :meth:`stop`). Thread-safe.
    """

    def __init__(self, flush: Callable[[list[str]], None], delay_s: float, batch: int) -> None:
        self._flush = flush
        self.delay_s = delay_s
        self.batch = batch
        self._lock = threading.Lock()
        self._ids: list[str] = []
        self._oldest = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, world_id: str) -> None:
        with self._lock:
            if not self._ids:
                self._oldest = time.monotonic()
            self._ids.append(world_id)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="rsi-marks", daemon=True)
                self._thread.start()

    def take(self, *, due_only: bool = True) -> list[str]:
        """The pending marks (only if due, with ``due_only``); they are removed from the queue."""
        with self._lock:
            if not self._ids or (due_only and len(self._ids) < self.batch
                                 and time.monotonic() - self._oldest < self.delay_s):
                return []
            ids, self._ids = self._ids, []
            return ids

    def restore(self, ids: list[str]) -> None:
        """Put back marks whose transaction failed (they are due at once)."""
        if ids:
            with self._lock:
                self._ids[:0] = ids
                self._oldest = time.monotonic() - self.delay_s

    def flush(self) -> None:
        """Write every pending mark now, in one transaction (on failure they stay pending)."""
        ids = self.take(due_only=False)
        if ids:
            self._write(ids)

    def _run(self) -> None:
        while not self._stop.wait(max(self.delay_s, 0.05)):
            ids = self.take(due_only=True)
            if ids:
                self._write(ids)

    def _write(self, ids: list[str]) -> None:
        try:
            self._flush(ids)
        except Exception as exc:  # the sweeper triggers them once more if they are never written
            self.restore(ids)
            log.warning("%d hand-off mark(s) not written yet (%s)", len(ids), type(exc).__name__)

    def stop(self) -> None:
        """Stop the thread and write what is pending."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self.flush()


def _mark(conn: Connection, world_ids: list[str]) -> list[str]:
    """Write the marks; the worlds whose mark was skipped (a locked row), to be put back."""
    if mark_handed_off(conn, world_ids) == len(world_ids):
        return []  # the steady path: one statement
    return unmarked(conn, world_ids)


@dataclass(frozen=True)
class RecordedTurn:
    """What :meth:`RsiClient.record_turn` / :meth:`RsiClient.record_signals` did.

    Attributes:
        world_id: the stored world's id; ``None`` when no world was stored (``skipped``, ``off``).
        io_id: the host's turn id.
        seq: the world's number in its conversation (from 1); ``None`` without a world.
        replayable: the stored world can be replayed (false above the size limit or without a world).
        dispatched: ``enqueued`` (a consolidation was enqueued), ``pending`` (a run is going; it
            re-runs once for the newest turn), ``deferred`` (Redis or the broker was down; the
            sweeper triggers it later), ``frozen`` (the agent is frozen: no run), ``skipped``
            (the provider runs its own loop: one ``skipped`` run row), ``off`` (no world captured:
            ``RSI_RECORD_WORLD`` off or the kernel refused the world; nothing enqueued).
        task_id: the Celery task id when ``enqueued``.
    """

    world_id: str | None
    io_id: str
    seq: int | None
    replayable: bool
    dispatched: Dispatched
    task_id: str | None = None


@dataclass(frozen=True)
class AgentInfo:
    """An agent as stored: current version (``None`` = H0), frozen flag, newest applied fence."""

    agent_id: str
    current_version: str | None
    frozen: bool
    applied_fence: int

    @classmethod
    def of(cls, row: db.AgentRow) -> AgentInfo:
        return cls(row.id, row.current_version, row.frozen, row.applied_fence)


@dataclass(frozen=True)
class VersionInfo:
    """One stored harness version with its provenance (docs/algorithm/consolidation.md §3.12.10) and the
    lessons it learned
    (``{world_id, lesson, run_id}``); its regression set is its own lessons and its ancestors'."""

    version: str
    parent_version: str | None
    run_id: str | None
    summary: dict[str, Any] | None
    created_at: datetime
    lessons: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, row: db.HarnessRow, lessons: Sequence[db.RegressionRow] = ()) -> VersionInfo:
        learned = tuple({"world_id": r.world_id, "lesson": r.lesson, "run_id": r.run_id}
                        for r in lessons if r.version == row.version)
        return cls(row.version, row.parent_version, row.run_id, row.summary, row.created_at, learned)


@dataclass(frozen=True)
class RunInfo:
    """One run row (no payload, no state)."""

    run_id: str
    kind: str
    io_id: str | None
    status: str
    reason: str | None
    start_version: str | None
    adopted_version: str | None
    fence: int | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    started_at: datetime
    finished_at: datetime | None

    @classmethod
    def of(cls, row: db.RunRow) -> RunInfo:
        return cls(row.id, row.kind, row.io_id, row.status, row.reason, row.start_version,
                   row.adopted_version, row.fence, row.result, row.error, row.started_at, row.finished_at)


@dataclass(frozen=True)
class RunProgress:
    """A run's phase (``open``, ``incumbent``, ``drafting``, ``candidates`` or its final status)
    and its stored trials of that phase out of the planned ones."""

    run_id: str
    status: str
    phase: str
    trials_done: int
    trials_total: int


def redis_client(url: str, *, timeout_s: float = REDIS_TIMEOUT_S) -> redis.Redis:
    """A redis-py client for coordination: ``timeout_s`` connect/socket timeouts and no retries, so
    an unreachable Redis fails fast. Accepts kombu's ``redis+socket://<path>`` spelling too."""
    return redis.Redis.from_url(redis_py_url(url), socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
                                retry=Retry(NoBackoff(), 0))


def _version_arg(version: str | None) -> str | None:
    """``None`` and :data:`H0_VERSION` both name H0 (no stored row)."""
    if version is None or version == H0_VERSION:
        return None
    if not isinstance(version, str) or not version:
        raise InvalidInput(f"version must be a stored version id or None (H0), got {type(version).__name__}")
    return check_label(version, "version", max_chars=MAX_HARNESS_VERSION_CHARS)


class RsiClient:
    """The host API (module docstring).

    Args:
        settings: the settings (``database_url``, ``redis_url``, retention, cache TTL, …).
        engine: SQLAlchemy engine (default: built from ``settings.database_url``).
        redis: Redis client for coordination and invalidation (default: built from
            ``settings.redis_url``; in the embedded in-process mode pass a fakeredis client).
        dispatcher: task dispatcher (default: :class:`KombuDispatcher` on ``settings.redis_url``).
        trajectory_retention: trajectory rows kept per agent.
        retention_every: world and trajectory retention run on every ``retention_every``-th
            recorded turn of an agent (1: on every turn); between two runs at most
            ``retention_every - 1`` rows of each are kept beyond the bound.
        mark_delay_s: longest wait of a hand-off mark (:data:`MARK_DELAY_S`).
        pool_size: database connections the client's own engine keeps (default
            :data:`~rsi_common.db.engine.DEFAULT_POOL_SIZE`); give at least the number of threads
            that record at once. Ignored when ``engine`` is given.
        record_retry_s: seconds a transient database error of the record path is retried
            (default ``settings.record_retry_s``; :mod:`rsi_common.record_retry`).

    Raises:
        SettingsError: ``redis`` or ``dispatcher`` is missing and ``settings.redis_url`` is unset.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        engine: Engine | None = None,
        redis: redis.Redis | None = None,
        dispatcher: Dispatcher | None = None,
        trajectory_retention: int = TRAJECTORY_RETENTION,
        retention_every: int = RETENTION_EVERY,
        mark_delay_s: float = MARK_DELAY_S,
        pool_size: int | None = None,
        record_retry_s: float | None = None,
    ) -> None:
        if (redis is None or dispatcher is None) and not settings.redis_url:
            raise SettingsError("RSI_REDIS_URL is not set: set it, or pass redis= and dispatcher= "
                                "(e.g. fakeredis and a memory:// KombuDispatcher in the embedded mode)")
        if retention_every < 1 or not mark_delay_s >= 0:
            raise InvalidInput("retention_every must be >= 1 and mark_delay_s >= 0")
        retry_s = settings.record_retry_s if record_retry_s is None else record_retry_s
        if not 0 <= retry_s <= 600:
            raise InvalidInput("record_retry_s must be between 0 and 600")
        self._budget = RetryBudget(float(retry_s))
        self._sleep: Callable[[float], None] = time.sleep
        """Waits between record attempts (tests replace it to restart a server in the pause)."""
        self._clock: Callable[[], float] = time.monotonic
        """Reads the seconds a record's retries have spent (tests replace it with one that only
        the pauses advance, so a slow refused connection does not shorten the budget)."""
        self.settings = settings
        self.trajectory_retention = trajectory_retention
        self.retention_every = retention_every
        self._owned: list[Callable[[], None]] = []
        if engine is None:
            pool: dict[str, Any] = {} if pool_size is None else {"pool_size": pool_size}
            engine = db.make_engine(settings.database_url, **pool)
            self._owned.append(engine.dispose)
        self.engine = engine
        self._sessions = db.session_factory(self.engine)
        if redis is None:
            redis = redis_client(str(settings.redis_url))
            self._owned.append(redis.close)
        self.redis = redis
        self.coord = Coordinator(redis, settings.lease_s)
        if dispatcher is None:
            kombu = KombuDispatcher(str(settings.redis_url), send_sent_event=settings.task_events,
                                    transport_options={"visibility_timeout": settings.visibility_timeout_s})
            self._owned.append(kombu.close)
            dispatcher = kombu
        self.dispatcher: Dispatcher = dispatcher
        self._cache: HarnessCache[tuple[Harness, HarnessLabel]] = HarnessCache(settings.harness_cache_ttl_s)
        self._listener = InvalidationListener(redis, self._cache.invalidate, self._cache.clear)
        self._listener_lock = threading.Lock()
        self._listener_started = False
        self._marks = _Marks(self._write_marks, mark_delay_s, MARK_BATCH)
        self._warm = False

    # --- recording --------------------------------------------------------------------------------

    def record_turn(self, agent_id: str, turn: TurnResult | dict[str, Any]) -> RecordedTurn:
        """Store a finished turn and trigger the agent's consolidation
        (docs/algorithm/consolidation.md §3.12.1, §3.12.4).

        In one transaction (docs/performance/record-path.md): the agent is created if new (and
        locked), the world is stored (``seq`` = max in the conversation + 1), the trajectory is
        stored, and on every ``retention_every``-th turn of the agent the latest ``world_retention``
        worlds and ``trajectory_retention`` trajectories are kept. Then, outside the transaction: a
        frozen agent gets no run; an own-loop turn got one ``skipped`` run row; otherwise
        ``try_begin`` → enqueue ``consolidate`` (or the pending mark), and the world's hand-off mark
        (``enqueued_at``) is queued: it is written by the client's next record transaction or within
        ``mark_delay_s`` (:meth:`flush_marks` writes it at once). Recording the same ``io_id`` again
        stores nothing new and triggers again.

        A transient database error (server restarting, connection dropped, SQLite locked) is retried
        with backoff for ``record_retry_s``; a hand-off that found Redis or the broker unreachable
        for ``HANDOFF_BUDGET_S`` (:mod:`rsi_common.record_retry`).

        Args:
            agent_id: the agent (created on its first turn).
            turn: a ``TurnResult`` or a turn mapping (:mod:`rsi_common.host_input`).

        Returns:
            The :class:`RecordedTurn`; ``deferred`` when Redis or the broker was unreachable.

        Raises:
            WorldError: malformed world, naming the field; nothing is stored.
            CredentialError: the world, trajectory or signals contain a credential; nothing is stored.
            InputLimitError: an id, size, depth, number or character breaks the input boundary
                (docs/security/input-boundary.md; ``WorldLimitError`` inside the world); nothing is stored.
            InvalidInput: any other malformed input; nothing is stored.
            TurnNotStored: the database kept failing for ``record_retry_s``; nothing is stored.
            sqlalchemy.exc.SQLAlchemyError: a database error that is not transient; nothing is stored.
        """
        parsed = parse_turn(agent_id, turn, record_world=self.settings.record_world)
        if parsed.own_loop:
            return self._record_without_world(agent_id, parsed, skipped=True)
        if parsed.world is None:
            return self._record_without_world(agent_id, parsed, skipped=False)
        world = parsed.world

        def write() -> tuple[Any, Any]:
            with self._write() as conn:
                return record_world_turn(
                    conn, agent_id, world, parsed.signals, parsed.trajectory,
                    world_retention=self.settings.world_retention,
                    trajectory_retention=self.trajectory_retention, retention_every=self.retention_every)

        agent, stored = retry_write(write, self._budget, agent_id=agent_id, io_id=parsed.io_id,
                                    sleep=self._sleep, clock=self._clock)
        recorded = RecordedTurn(stored.id, stored.io_id, stored.seq, stored.replayable, "frozen")
        return recorded if agent.frozen else self._hand_off(agent_id, recorded)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        """One record transaction (:func:`~rsi_common.db.lean_tx.lean_begin`: no SQLAlchemy
        transaction objects, the engine's events kept); the hand-off marks that are due ride on it
        (put back if it fails)."""
        if not self._warm:  # the statements compiled before the first write turn, not under it
            self._warm = warm_record_path(self.engine)
        marks = self._marks.take()
        skipped: list[str] = []
        try:
            with lean_begin(self.engine) as conn:
                yield conn
                if marks:  # last: the rows it locks are never held while this transaction waits
                    skipped = _mark(conn, marks)
        except BaseException:
            self._marks.restore(marks)
            raise
        self._marks.restore(skipped)

    def _write_marks(self, world_ids: list[str]) -> None:
        with self.engine.begin() as conn:
            skipped = _mark(conn, world_ids)
        self._marks.restore(skipped)

    def flush_marks(self) -> None:
        """Write the pending hand-off marks (``enqueued_at``) now, in one transaction; otherwise
        they are written within ``mark_delay_s`` (and by :meth:`close`). A failure is logged and
        the marks stay pending."""
        self._marks.flush()

    def _record_without_world(self, agent_id: str, parsed: ParsedTurn, *, skipped: bool) -> RecordedTurn:
        def write() -> None:
            with self._write() as conn:
                record_bare_turn(conn, agent_id, parsed.trajectory,
                                 skipped_reason=OWN_LOOP_REASON if skipped else None,
                                 io_id=parsed.io_id, trajectory_retention=self.trajectory_retention,
                                 run_retention=self.settings.run_retention,
                                 retention_every=self.retention_every)

        retry_write(write, self._budget, agent_id=agent_id, io_id=parsed.io_id, sleep=self._sleep,
                    clock=self._clock)
        return RecordedTurn(None, parsed.io_id, None, False, "skipped" if skipped else "off")

    def _hand_off(self, agent_id: str, recorded: RecordedTurn) -> RecordedTurn:
        handoff = trigger_consolidation(self.coord, self.dispatcher, agent_id, recorded.io_id)
        for delay in RetryBudget(min(HANDOFF_BUDGET_S, self._budget.total_s)).delays():
            if handoff.outcome != "deferred":
                break
            self._sleep(delay)  # Redis or the broker restarting: the turn is stored, try the trigger again
            handoff = trigger_consolidation(self.coord, self.dispatcher, agent_id, recorded.io_id)
        if handoff.handed_off and recorded.world_id is not None:
            self._marks.add(recorded.world_id)
        return dataclasses.replace(recorded, dispatched=handoff.outcome, task_id=handoff.task_id)

    def record_signals(self, agent_id: str, io_id: str, signals: dict[str, Any]) -> RecordedTurn:
        """Merge explicit signals into a stored turn's world and trigger like :meth:`record_turn`.

        Top-level keys replace the stored ones; ``implicit`` (written by consolidation) is never
        overwritten. The world's ``enqueued_at`` is cleared in the same transaction, so a failed
        trigger is retried by the sweeper. A frozen agent's signals are stored without a trigger.

        Raises:
            UnknownAgentError: no such agent.
            InvalidInput: no stored world for ``io_id`` (never recorded, or removed by retention),
                or malformed signals (named ``signals.<key>``).
            InputLimitError: an id breaks the id grammar, or a signal the input boundary.
            CredentialError: a signal looks like a credential.
            TurnNotStored: the database kept failing for ``record_retry_s``; nothing is stored.
        """
        check_id(agent_id, "agent_id")
        check_id(io_id, "io_id")
        clean = check_signals(signals)

        def write() -> tuple[RecordedTurn, bool]:
            marks = self._marks.take(due_only=False)
            try:
                with self._sessions.begin() as s:
                    recorded, frozen = self._store_signals(s, agent_id, io_id, clean)
                    # the clear supersedes this world's pending mark: it must not be written after it
                    rest = marks if frozen else [m for m in marks if m != recorded.world_id]
                    skipped = _mark(s.connection(), rest) if rest else []
            except BaseException:
                self._marks.restore(marks)
                raise
            self._marks.restore(skipped)
            return recorded, frozen

        recorded, frozen = retry_write(write, self._budget, agent_id=agent_id, io_id=io_id,
                                       sleep=self._sleep, clock=self._clock)
        return recorded if frozen else self._hand_off(agent_id, recorded)

    def _store_signals(self, s: Session, agent_id: str, io_id: str,
                       clean: dict[str, Any]) -> tuple[RecordedTurn, bool]:
        frozen = db.get_agent(s, agent_id).frozen
        row = db.update_signals(s, agent_id, clean, io_id=io_id)
        if row is None:
            raise InvalidInput(f"agent {safe_repr(agent_id)} has no stored world for io "
                               f"{safe_repr(io_id)} (never recorded, or removed by retention)")
        if not frozen:
            row.enqueued_at = None
        return RecordedTurn(row.id, row.io_id, row.seq, row.replayable, "frozen"), frozen

    # --- the current harness ----------------------------------------------------------------------

    def current_harness(self, agent_id: str) -> Harness:
        """The harness the agent's next turn must use (docs/formats.md §5.4,
        docs/algorithm/consolidation.md §3.12.9).

        ``RSI_HARNESS_DIR`` (admin pin) wins; else the payload of the agent's ``current_version``;
        else H0 — also for an agent never seen (its first turn runs with H0). Cached per process
        for ``harness_cache_ttl_s``; an adopt, rollback, pin or clone published on ``rsi:harness``
        drops the entry at once (the listener thread starts on the first call).

        Raises:
            InputLimitError: the agent id breaks the id grammar.
            TamperError, ManifestError, PathEscapeError: the stored payload or pinned directory is
                invalid (never silently replaced by H0).
        """
        return self._resolve(agent_id)[0]

    def _resolve(self, agent_id: str) -> tuple[Harness, HarnessLabel]:
        check_id(agent_id, "agent_id")
        self._ensure_listener()
        hit = self._cache.get(agent_id)
        if hit is not None:
            return hit
        token = self._cache.token(agent_id)
        payload = None if self.settings.harness_dir else self._current_payload(agent_id)
        value = resolve_harness(self.settings.harness_dir, payload)
        self._cache.put(agent_id, value, token)
        return value

    def _current_payload(self, agent_id: str) -> dict[str, Any] | None:
        with self._read() as s:
            agent = s.get(db.AgentRow, agent_id)
            if agent is None or agent.current_version is None:
                return None
            return db.get_harness(s, agent_id, agent.current_version).payload

    @contextlib.contextmanager
    def _read(self) -> Iterator[Session]:
        """A read-only session (a deferred transaction on SQLite: no write lock taken)."""
        with self._sessions() as s:
            s.connection(execution_options={"sqlite_begin": "DEFERRED"})
            yield s

    def _ensure_listener(self) -> None:
        if self._listener_started:
            return
        with self._listener_lock:
            if not self._listener_started:
                self._listener.start()
                self._listener_started = True

    def start_listener(self, wait_s: float = 1.0) -> bool:
        """Start the invalidation listener now (it otherwise starts on the first
        :meth:`current_harness`) and wait up to ``wait_s`` for its subscription.

        Returns:
            Whether the listener is subscribed (False: Redis unreachable; the TTL still applies).
        """
        self._ensure_listener()
        return self._listener.wait_subscribed(wait_s)

    def _changed(self, agent_id: str) -> None:
        """Drop the local cache entry and publish the change to every other process."""
        self._cache.invalidate(agent_id)
        try:
            self.coord.publish_harness_change(agent_id)
        except COORD_ERRORS as exc:
            log.warning("agent %s: harness change not published (%s); other hosts see it within %s s",
                        agent_id, type(exc).__name__, self.settings.harness_cache_ttl_s)

    # --- versions ---------------------------------------------------------------------------------

    def _update(self, agent_id: str, change: Callable[[Session], db.AgentRow]) -> AgentInfo:
        with self._sessions.begin() as s:
            info = AgentInfo.of(change(s))
        self._changed(agent_id)
        return info

    def rollback(self, agent_id: str, version: str | None) -> AgentInfo:
        """Make a stored ``version`` (``None`` or ``H0_VERSION`` = H0) current from the next turn.

        A run going meanwhile will not adopt (docs/algorithm/consolidation.md §3.12.7 b). Publishes the
        invalidation.

        Raises:
            UnknownAgentError: no such agent.
            UnknownVersionError: the version is not stored for this agent.
        """
        v = _version_arg(version)
        return self._update(agent_id, lambda s: db.rollback_to(s, agent_id, v))

    def pin(self, agent_id: str, version: str | None) -> AgentInfo:
        """Like :meth:`rollback`, and freeze the agent (no further consolidation)."""
        v = _version_arg(version)
        return self._update(agent_id, lambda s: db.pin(s, agent_id, v))

    def freeze(self, agent_id: str) -> AgentInfo:
        """Stop consolidating the agent; its turns are still recorded. Raises ``UnknownAgentError``."""
        return self._update(agent_id, lambda s: db.freeze(s, agent_id))

    def unfreeze(self, agent_id: str) -> AgentInfo:
        """Resume consolidating the agent (from its next trigger). Raises ``UnknownAgentError``."""
        return self._update(agent_id, lambda s: db.unfreeze(s, agent_id))

    def clone(self, agent_id: str, new_agent_id: str) -> AgentInfo:
        """Give ``new_agent_id`` (created if absent) the lineage and current version of ``agent_id``.

        Raises:
            UnknownAgentError: the source does not exist.
            InvalidInput: source and target are the same agent, or the new id is invalid.
        """
        return self._update(new_agent_id, lambda s: db.clone_agent(s, agent_id, new_agent_id))

    def stored_harness(self, agent_id: str, version: str | None) -> Harness:
        """A stored ``version`` of the agent (``None`` = H0), verified (``materialize``), uncached.

        Raises:
            UnknownVersionError: the version is not stored for this agent.
            TamperError: the stored payload does not hash to its version.
        """
        v = _version_arg(version)
        if v is None:
            return h0()
        with self._read() as s:
            return materialize(db.get_harness(s, agent_id, v).payload)

    def export_checkpoint(self, agent_id: str, version: str | None) -> str:
        """The checkpoint text (docs/formats.md §5.3) of a stored ``version`` (``None`` = H0) of the agent,
        with its provenance as the checkpoint's ``lineage``.

        Raises:
            UnknownAgentError: no such agent.
            UnknownVersionError: the version is not stored for this agent.
        """
        v = _version_arg(version)
        with self._read() as s:
            db.get_agent(s, agent_id)
            if v is None:
                return checkpoint_json(h0(), parent="", lineage=[{"source": "h0"}])
            row = db.get_harness(s, agent_id, v)
            lineage = [{"run_id": row.run_id, "summary": row.summary,
                        "created_at": row.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")}]
            return checkpoint_json(materialize(row.payload), parent=row.parent_version or "",
                                   lineage=lineage)

    def import_version(self, agent_id: str, checkpoint: Checkpoint, *, expected_current: str | None,
                       adopt: bool = False) -> VersionInfo:
        """Store a loaded checkpoint's harness as a version of the agent (parent: the current version).

        The caller screens the harness against ``expected_current`` first (``rsi harness import``
        runs the gate's deterministic checks, docs/operations.md#harness-checkpoints); the agent's
        current version is re-read under its lock and must still be ``expected_current``. With
        ``adopt`` the version becomes current from the next turn (like :meth:`rollback`). A version
        already stored keeps its first provenance. Nothing is stored when any check fails.

        An agent that does not exist yet is created (at H0) first.

        Raises:
            CredentialError: the checkpoint's lineage carries a credential (the field is named).
            InvalidInput: the current version moved since the screen (screen again).
        """
        hit = find_in(checkpoint.lineage, "lineage")
        if hit is not None:
            raise CredentialError(f"{hit[0]}: looks like a credential ({describe(hit[1])}); refused")
        summary = {"source": "import", "created_at": checkpoint.created_at[:40],
                   "created_by": checkpoint.created_by[:200], "lineage": checkpoint.lineage}
        with self._sessions.begin() as s:
            db.ensure_agent(s, agent_id)
            agent = db.lock_agent(s, agent_id)
            if agent.current_version != _version_arg(expected_current):
                raise InvalidInput(f"agent {safe_repr(agent_id)}: the current version moved while the "
                                   "checkpoint was screened; import again")
            harness = checkpoint.harness.with_parent(agent.current_version)
            row = db.add_harness(s, agent_id, harness.version, harness.payload(),
                                 parent_version=agent.current_version, summary=summary)
            info = VersionInfo.of(row)
            if adopt:
                db.rollback_to(s, agent_id, harness.version)
        if adopt:
            self._changed(agent_id)
        return info

    # --- reads ------------------------------------------------------------------------------------

    def agent(self, agent_id: str) -> AgentInfo:
        """The stored agent. Raises ``UnknownAgentError``."""
        with self._read() as s:
            return AgentInfo.of(db.get_agent(s, agent_id))

    def lineage(self, agent_id: str) -> list[VersionInfo]:
        """Every stored version of the agent, oldest first. Raises ``UnknownAgentError``."""
        with self._read() as s:
            versions = db.lineage(s, agent_id)  # checks the id first
            lessons = db.regressions(s, agent_id)
            return [VersionInfo.of(r, lessons) for r in versions]

    def runs(self, agent_id: str, limit: int = 50) -> list[RunInfo]:
        """The agent's latest runs, newest first. Raises ``UnknownAgentError``."""
        with self._read() as s:
            db.get_agent(s, agent_id)
            return [RunInfo.of(r) for r in db.runs(s, agent_id, limit)]

    def progress(self, run_id: str) -> RunProgress:
        """Where a run is (for progress displays): its phase and how many of its trials are stored.

        Raises:
            InvalidInput: no such run.
        """
        check_label(run_id, "run_id", max_chars=64)
        with self._read() as s:
            run = db.get_run(s, run_id)
            params = run.params or {}
            slots = params.get("slots") or {}
            rows = db.replay_rows(s, run_id)
        phase = str(params.get("phase") or "open") if run.status == "running" else run.status
        if phase == "candidates":
            total = sum(len(v) for k, v in slots.items() if k != "incumbent")
            done = sum(1 for r in rows if r.candidate != "incumbent")
        else:
            total = len(slots.get("incumbent") or [])
            done = sum(1 for r in rows if r.candidate == "incumbent")
        return RunProgress(run_id, run.status, phase, done, total)

    def diff(self, agent_id: str, v1: str | None, v2: str | None) -> str:
        """Unified diff between two versions' workspaces (``None`` / ``H0_VERSION`` = H0); ``""`` if equal.

        Raises:
            UnknownAgentError: no such agent.
            UnknownVersionError: a version is not stored for this agent.
        """
        with self._read() as s:
            db.get_agent(s, agent_id)
            trees = []
            for version in (_version_arg(v1), _version_arg(v2)):
                if version is None:
                    trees.append(workspace_of(h0()))
                else:
                    trees.append(workspace_of(materialize(db.get_harness(s, agent_id, version).payload)))
        return diff_trees(trees[0], trees[1])

    # --- convenience ------------------------------------------------------------------------------

    def run_turn(self, agent_id: str, plan: TurnPlan, model_client: ModelClient, *,
                 seed: int | None = None, on_event: EventSink | None = None,
                 cancelled: Callable[[], bool] | None = None) -> TurnResult:
        """Resolve the harness, run one kernel turn with it, record the turn, return the result.

        The harness is resolved once, before the turn, and used for the whole turn (docs/architecture.md
        invariant 1): a change published meanwhile applies from the next turn. World capture
        follows ``RSI_RECORD_WORLD``; model retries follow the settings; an unreachable Redis or
        broker defers the trigger.

        **Recording never loses the answer** (``docs/operations/failure-recovery.md``, *Capture
        errors*): the result comes back with ``recorded = True`` when the turn was stored as the
        settings ask, else ``recorded = False`` and ``record_error`` saying why — the kernel refused
        or could not capture the world, or ``record_turn`` raised (invalid input, a credential, a
        database error). The reason names the error class and, for the project's own errors, their
        message (field paths, never values); a database error is named by its class only.

        ``on_event`` streams the turn to the host (:mod:`rsi_common.kernel.events`); ``cancelled``
        is checked before every model call and between streamed chunks. A cancelled turn is not
        recorded (``record_error`` says so): nothing partial is stored.

        Raises:
            InvalidInput: ``plan.io_id`` is empty, or ``plan.agent_id`` names another agent.
            InputLimitError: an id of the plan breaks the id grammar (checked before the turn runs).
        """
        plan = check_plan(agent_id, plan)
        harness, label = self._resolve(agent_id)
        result = run_turn(plan, harness, model_client, record_world=self.settings.record_world, seed=seed,
                          retry=RetryPolicy.from_settings(self.settings), lineage=label, on_event=on_event,
                          cancelled=cancelled)
        if result.status == "cancelled":
            result.recorded, result.record_error = False, CANCELLED_NOT_RECORDED
            return result
        return self._record_result(agent_id, result)

    def _record_result(self, agent_id: str, result: TurnResult) -> TurnResult:
        """Record a finished turn of :meth:`run_turn`; set ``recorded`` / ``record_error``."""
        try:
            self.record_turn(agent_id, result)
        except Exception as exc:  # the host keeps its answer whatever recording does
            reason = f"not recorded: {safe_reason(exc, 200)}"
            if isinstance(exc, SQLAlchemyError):
                reason = f"not recorded: database error {type(exc).__name__}"
            elif isinstance(exc, TurnNotStored):
                reason = f"not recorded: database error {exc.error}"
            log.error("agent %s: turn not recorded: %s", agent_id, type(exc).__name__)
            result.recorded, result.record_error = False, reason
            return result
        result.recorded = not result.record_error  # set by the kernel when the world was not captured
        return result

    # --- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Write the pending hand-off marks, stop the listener and close what the client built
        itself. Idempotent."""
        self._marks.stop()
        self._listener.stop()
        while self._owned:
            closer = self._owned.pop()
            try:
                closer()
            except Exception as exc:  # closing must not fail the host's shutdown
                log.debug("closing %s failed: %s", closer, type(exc).__name__)

    def __enter__(self) -> RsiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
