"""Hand a task to the Celery cluster by name, without importing Celery (docs/architecture.md#2-packages).

A host process (``rsi_common.client``) must enqueue ``consolidate`` but must not depend on Celery.
:class:`KombuDispatcher` therefore publishes a Celery **task message protocol v2** JSON message
with kombu alone; the worker's Celery app registers the tasks under the names and queues below.
:class:`RecordingDispatcher` is the stub shipped for tests (one interface, one stub, like every
plug-in family of this project).

Wire format (what :func:`task_message` builds, checked against a real Celery worker in the tests):

* **headers** — ``lang "py"``, ``task`` (the name), ``id`` (a UUID4, also ``correlation_id``),
  ``root_id`` (= ``id``: every message is a root), ``parent_id``, ``group``, ``group_index``,
  ``shadow``, ``eta``, ``expires`` (all ``None``), ``retries`` 0, ``timelimit`` ``[None, None]``
  (Celery's worker reads it as ``[hard, soft]``; ``None`` = the task's own limits), ``argsrepr`` /
  ``kwargsrepr`` (``repr``, cut to 1,024 characters), ``origin`` ``gen<pid>@<host>``,
  ``ignore_result``, ``replaced_task_nesting`` 0, ``stamped_headers`` ``None``, ``stamps`` ``{}``;
* **body** — JSON ``[args, {}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]``,
  ``content_type`` ``application/json``, ``content_encoding`` ``utf-8`` (never pickle);
* **properties** — ``correlation_id`` = task id, ``reply_to`` ``""``, ``delivery_mode`` 2
  (persistent), ``priority`` 0;
* **routing** — through the default exchange with routing key = queue name, so delivery never
  depends on binding tables a broker may have lost (Redis restarted without persistence drops
  messages sent to a named exchange silently). The queue itself is declared with Celery's
  default definition (queue = direct exchange = routing key) on the first publish of each pooled
  connection, as the workers declare it.

Task events: like Celery's own ``send_task`` with ``task_send_sent_event`` on (the project's workers
turn it on), each published message is followed by a **task-sent event** (:func:`sent_event`) on
Celery's event exchange ``celeryev`` (fanout on Redis, topic elsewhere; routing key ``task.sent``;
JSON; transient; message header ``hostname``), so Flower and the Celery Prometheus exporter see
host-enqueued tasks with their sent time, queue and routing key. The event carries the message's
``argsrepr`` / ``kwargsrepr``, never the arguments themselves. It is best effort, as in Celery: a
failure to publish it is logged and does not fail the enqueue (the task message is already on its
queue).

Failure contract: :meth:`Dispatcher.enqueue` either returns the task id or raises
:class:`~rsi_common.errors.BrokerUnavailable` within about ``timeout_s`` (default 1 s: connect and
socket timeouts, no connection retries, no publish retries). A turn therefore never blocks on a
dead broker; the caller keeps the work as data (an un-enqueued world) and the sweeper retries.
A publish that timed out may still have reached the broker: consumers must tolerate a message
whose lease is no longer valid (the consolidate task's first lease renewal fails and it stops).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import kombu.entity
import kombu.pools
from kombu.exceptions import InconsistencyError, KombuError, LimitExceeded

from rsi_common.errors import BrokerUnavailable, InvalidInput
from rsi_common.kombu_channel import KeptClientConnection

__all__ = [
    "ARGSREPR_MAX_CHARS",
    "DEFAULT_DISPATCH_TIMEOUT_S",
    "EVENT_EXCHANGE",
    "QUEUES",
    "QUEUE_AGENTS",
    "QUEUE_CONSOLIDATE",
    "QUEUE_JUDGE",
    "QUEUE_REPLAY",
    "RUNTIME_TASKS",
    "TASK_AFTER_INCUMBENT",
    "TASK_AGENT_TURN",
    "TASK_CONSOLIDATE",
    "TASK_DRAFT_CANDIDATE",
    "TASK_DREAM_EPISODES",
    "TASK_EVOLVE_STEP",
    "TASK_EVOLVE_TRIAL",
    "TASK_JUDGE_ROUND",
    "TASK_QUEUES",
    "TASK_RELEASE_WAVE",
    "TASK_REPLAY_TRIAL",
    "TASK_SWEEP",
    "TASK_TICK",
    "DispatchedTask",
    "Dispatcher",
    "KombuDispatcher",
    "RecordingDispatcher",
    "TaskMessage",
    "celery_queue",
    "kombu_url",
    "redis_py_url",
    "sent_event",
    "task_message",
]

log = logging.getLogger(__name__)

QUEUE_CONSOLIDATE = "consolidate"
"""Queue of ``consolidate`` and the other per-run steps."""
QUEUE_REPLAY = "replay"
"""Queue of ``replay_trial``."""
QUEUE_JUDGE = "judge"
"""Queue of the chord bodies that judge a round."""
QUEUES: tuple[str, ...] = (QUEUE_CONSOLIDATE, QUEUE_REPLAY, QUEUE_JUDGE)

# Task names are part of the wire contract (a host enqueues ``consolidate`` by name); the worker's
# Celery app registers exactly these (``rsi_worker.cluster.tasks``) and routes them by TASK_QUEUES.
TASK_CONSOLIDATE = "rsi.consolidate"
"""``consolidate(agent_id, io_id, token, fence)``: the ``open`` step of a run
(docs/algorithm/consolidation.md §3.12.1)."""
TASK_REPLAY_TRIAL = "rsi.replay_trial"
"""``replay_trial(run_id, slot)``: one trial (a chord member)."""
TASK_AFTER_INCUMBENT = "rsi.after_incumbent"
"""``after_incumbent(results, run_id)``: the chord body after the incumbent's trials."""
TASK_DRAFT_CANDIDATE = "rsi.draft_candidate"
TASK_RELEASE_WAVE = "rsi.release_wave"
"""A candidate's wave gate: sends its second wave when released or at ``early_stop_wave_s``
(docs/performance/consolidation.md#trial-order)."""
"""``draft_candidate(run_id, variant)``: one draft (a chord member); a passed draft replaces itself
with the group of its candidate's ``replay_trial`` tasks."""
TASK_JUDGE_ROUND = "rsi.judge_round"
"""``judge_round(results, run_id)``: the chord body after the drafts and their trials."""

QUEUE_AGENTS = "agents"
"""Queue of the agent runtime's turns (docs/runtime/README.md#turns); served by ``rsi worker -Q agents``.
Kept out of :data:`QUEUES` and :data:`TASK_QUEUES`: the runtime's task is published to it by name."""
TASK_AGENT_TURN = "rsi.agent_turn"
"""``agent_turn(agent, session)``: one slice of a registered agent's session."""
TASK_TICK = "rsi.tick"
"""``tick()``: the runtime's periodic pass (overdue waits, unmarked mailboxes, child timeouts)."""
RUNTIME_TASKS: tuple[str, ...] = (TASK_AGENT_TURN, TASK_TICK)
"""The runtime's tasks, published to :data:`QUEUE_AGENTS` by name."""

TASK_SWEEP = "rsi.sweep"
"""``sweep()``: the sweeper (Celery beat)."""
TASK_EVOLVE_STEP = "rsi.evolve_step"
"""``evolve_step(results, name, agent, token, fence, io)``: one step of an offline evolve run (a chain link
and chord body) carrying the run's lease (``rsi_worker/cluster/evolve_watch.py``)."""
TASK_EVOLVE_TRIAL = "rsi.evolve_trial"
"""``evolve_trial(name, spec, agent, token, fence, io)``: one trial of an evolve run (a chord member)."""

TASK_DREAM_EPISODES = "rsi.dream_episodes"
"""A chunk of Dream replay episodes (docs/dream/evaluation.md#fan-out)."""
TASK_QUEUES: Mapping[str, str] = {
    TASK_CONSOLIDATE: QUEUE_CONSOLIDATE,
    TASK_DRAFT_CANDIDATE: QUEUE_CONSOLIDATE,
    TASK_SWEEP: QUEUE_CONSOLIDATE,
    TASK_DREAM_EPISODES: QUEUE_REPLAY,
    TASK_REPLAY_TRIAL: QUEUE_REPLAY,
    TASK_RELEASE_WAVE: QUEUE_REPLAY,
    TASK_AFTER_INCUMBENT: QUEUE_JUDGE,
    TASK_JUDGE_ROUND: QUEUE_JUDGE,
    TASK_EVOLVE_STEP: QUEUE_CONSOLIDATE,
    TASK_EVOLVE_TRIAL: QUEUE_REPLAY,
}
"""Task name → queue. ``replay`` carries the fan-out; ``judge`` the chord bodies that judge."""

DEFAULT_DISPATCH_TIMEOUT_S = 1.0
"""Upper bound, in seconds, of one failing :meth:`KombuDispatcher.enqueue` (connect, send, or wait
for a pooled producer)."""
ARGSREPR_MAX_CHARS = 1024
"""``argsrepr`` / ``kwargsrepr`` are cut to this many characters (Celery's default size)."""
EVENT_EXCHANGE = "celeryev"
"""Celery's event exchange (its ``event_exchange`` setting, left at the default by the workers)."""
_FANOUT_EVENT_TRANSPORTS = frozenset({"redis", "gcpubsub"})
"""Transports on which Celery declares the event exchange as fanout (topic elsewhere)."""


class Dispatcher(Protocol):
    """Enqueues a task by name (the Celery app of ``rsi_worker`` registers the names)."""

    def enqueue(self, task: str, args: list[Any], queue: str) -> str:
        """Publish one task message.

        Args:
            task: registered task name, e.g. :data:`TASK_CONSOLIDATE`.
            args: positional arguments; JSON values only.
            queue: queue name, e.g. :data:`QUEUE_CONSOLIDATE`.

        Returns:
            The task id (a UUID string).

        Raises:
            BrokerUnavailable: the broker could not be reached, or refused the message, within the
                dispatcher's timeout. Nothing is retried; the caller keeps the work as data.
            InvalidInput: ``args`` are not JSON values, or the task or queue name is empty.
        """
        ...


@dataclass(frozen=True)
class TaskMessage:
    """One Celery protocol v2 message: what is published, before transport encoding."""

    task_id: str
    headers: dict[str, Any]
    properties: dict[str, Any]
    """``correlation_id``, ``reply_to``, ``delivery_mode``, ``priority``."""
    body: str
    """JSON ``[args, kwargs, embed]``."""
    content_type: str = "application/json"
    content_encoding: str = "utf-8"


_HOSTNAME = socket.gethostname()
# kombu ships no complete type hints: its classes are used through Any-typed names.
_Connection: Any = KeptClientConnection
"""kombu's ``Connection``, its Redis channels keeping one client each (docs/performance/record-path.md)."""
_Exchange: Any = kombu.entity.Exchange
_Queue: Any = kombu.entity.Queue
_ProducerPool: Any = kombu.pools.ProducerPool
KombuQueue = Any


def _cut(text: str) -> str:
    return text if len(text) <= ARGSREPR_MAX_CHARS else text[: ARGSREPR_MAX_CHARS - 3] + "..."


def task_message(
    task: str, args: Sequence[Any], *, task_id: str | None = None, ignore_result: bool = True
) -> TaskMessage:
    """Build the protocol v2 message of ``task(*args)`` (module docstring).

    Args:
        task: task name.
        args: positional arguments (JSON values; tuples become lists).
        task_id: the id to use (default: a new UUID4).
        ignore_result: tell the worker not to store the task's return value (hosts never read it;
            the durable outcome of a run is its SQL row).

    Raises:
        InvalidInput: empty task name, or ``args`` that are not JSON values (NaN included).
    """
    if not isinstance(task, str) or not task:
        raise InvalidInput(f"task name must be a non-empty string, got {task!r}")
    tid = task_id or str(uuid.uuid4())
    arg_list = list(args)
    embed = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    try:
        body = json.dumps([arg_list, {}, embed], allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"task args of {task!r} must be JSON values: {exc}") from None
    headers: dict[str, Any] = {
        "lang": "py", "task": task, "id": tid, "shadow": None, "eta": None, "expires": None,
        "group": None, "group_index": None, "retries": 0, "timelimit": [None, None],
        "root_id": tid, "parent_id": None, "argsrepr": _cut(repr(arg_list)), "kwargsrepr": "{}",
        "origin": f"gen{os.getpid()}@{_HOSTNAME}", "ignore_result": ignore_result,
        "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {},
    }
    properties = {"correlation_id": tid, "reply_to": "", "delivery_mode": 2, "priority": 0}
    return TaskMessage(tid, headers, properties, body)


def _utcoffset_h() -> float:
    """This host's offset to UTC in hours, as Celery's events carry it (west of UTC positive)."""
    return (time.altzone if time.localtime().tm_isdst else time.timezone) / 3600


def sent_event(
    message: TaskMessage, queue: str, *, clock: int, timestamp: float | None = None
) -> dict[str, Any]:
    """The ``task-sent`` event of ``message`` published to ``queue`` through the default exchange,
    with the fields Celery's ``send_task`` gives it (``uuid``, ``root_id``, ``parent_id``, ``name``,
    ``args`` / ``kwargs`` = the message's ``argsrepr`` / ``kwargsrepr``, ``retries``, ``eta``,
    ``expires``, ``queue``, ``exchange`` ``""``, ``routing_key`` = ``queue``) and those its event
    dispatcher adds (``hostname`` = the message's origin, ``utcoffset`` in hours, ``pid``, ``clock``
    — this process's logical clock —, ``timestamp`` in seconds since the epoch, ``type``)."""
    h = message.headers
    return {
        "uuid": message.task_id, "root_id": h["root_id"], "parent_id": h["parent_id"], "name": h["task"],
        "args": h["argsrepr"], "kwargs": h["kwargsrepr"], "retries": h["retries"], "eta": h["eta"],
        "expires": h["expires"], "queue": queue, "exchange": "", "routing_key": queue,
        "hostname": h["origin"], "utcoffset": _utcoffset_h(), "pid": os.getpid(), "clock": clock,
        "timestamp": time.time() if timestamp is None else timestamp, "type": "task-sent",
    }


def kombu_url(url: str) -> str:
    """The kombu spelling of a Redis URL: redis-py's ``unix://<path>`` → ``redis+socket://<path>``;
    every other URL unchanged."""
    return "redis+socket://" + url[len("unix://"):] if url.startswith("unix://") else url


def redis_py_url(url: str) -> str:
    """The redis-py spelling of a Redis URL: kombu's ``redis+socket://<path>`` → ``unix://<path>``;
    every other URL unchanged (the inverse of :func:`kombu_url`)."""
    return "unix://" + url[len("redis+socket://"):] if url.startswith("redis+socket://") else url


def celery_queue(name: str) -> KombuQueue:
    """Celery's default definition of queue ``name``: direct exchange ``name``, routing key ``name``."""
    return _Queue(name, _Exchange(name, type="direct", durable=True), routing_key=name, durable=True)


class KombuDispatcher:
    """Publishes Celery protocol v2 messages with kombu (any kombu transport: ``redis://``,
    ``redis+socket://``, ``unix://``, ``memory://``, ``amqp://`` …).

    Thread-safe: each call borrows a producer (with its own pooled broker connection) from a
    pool of ``pool_limit``; construction opens no connection.

    Args:
        broker_url: the broker URL (``RSI_REDIS_URL`` in every mode but the in-process one).
        transport_options: kombu transport options (e.g. ``visibility_timeout``,
            ``global_keyprefix``); they override the timeout defaults below.
        timeout_s: connect and socket timeout in seconds (``socket_connect_timeout``,
            ``socket_timeout``, ``connect_timeout``); also the longest wait for a free producer.
            Connection retries are off (``max_retries`` 0) and publishing is never retried.
        pool_limit: producers (and connections) kept per dispatcher.
        ignore_result: the ``ignore_result`` header of every message.
        send_sent_event: publish a ``task-sent`` event after each message (module docstring).
    """

    def __init__(
        self,
        broker_url: str,
        *,
        transport_options: Mapping[str, Any] | None = None,
        timeout_s: float = DEFAULT_DISPATCH_TIMEOUT_S,
        pool_limit: int = 10,
        ignore_result: bool = True,
        send_sent_event: bool = True,
    ) -> None:
        if not timeout_s > 0 or pool_limit < 1:
            raise InvalidInput("timeout_s must be > 0 and pool_limit >= 1")
        options: dict[str, Any] = {
            "max_retries": 0, "socket_connect_timeout": timeout_s, "socket_timeout": timeout_s,
            **dict(transport_options or {}),
        }
        self.timeout_s = float(timeout_s)
        self.ignore_result = ignore_result
        self._connection = _Connection(kombu_url(broker_url), transport_options=options,
                                      connect_timeout=timeout_s)
        self._producers = _ProducerPool(self._connection.Pool(limit=pool_limit), limit=pool_limit)
        self.send_sent_event = send_sent_event
        fanout = self._connection.transport.driver_type in _FANOUT_EVENT_TRANSPORTS
        self._event_exchange = _Exchange(EVENT_EXCHANGE, type="fanout" if fanout else "topic")
        self._clock = itertools.count(1)
        self._queues: dict[str, KombuQueue] = {}
        self._lock = threading.Lock()
        self._errors: tuple[type[BaseException], ...] = (
            KombuError, OSError, *self._connection.connection_errors, *self._connection.channel_errors,
        )

    def _queue(self, name: str) -> KombuQueue:
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"queue name must be a non-empty string, got {name!r}")
        with self._lock:
            queue = self._queues.get(name)
            if queue is None:
                queue = self._queues[name] = celery_queue(name)
            return queue

    def enqueue(self, task: str, args: list[Any], queue: str) -> str:
        """Publish ``task(*args)`` to ``queue`` (see :meth:`Dispatcher.enqueue`)."""
        message = task_message(task, args, ignore_result=self.ignore_result)
        target = self._queue(queue)
        try:
            producer = self._producers.acquire(block=True, timeout=self.timeout_s)
        except LimitExceeded:
            raise BrokerUnavailable(f"no free broker connection within {self.timeout_s} s") from None
        except self._errors as exc:
            raise BrokerUnavailable(f"broker unreachable: {type(exc).__name__}: {exc}") from None
        try:
            try:
                self._publish(producer, message, target)
            except self._errors as exc:
                self._reset(producer)
                raise BrokerUnavailable(f"broker unreachable: {type(exc).__name__}: {exc}") from None
            if self.send_sent_event:
                self._publish_sent_event(producer, message, target.name)
        finally:
            producer.release()
        return message.task_id

    def _publish_sent_event(self, producer: Any, message: TaskMessage, queue: str) -> None:
        """Publish the ``task-sent`` event of ``message``; a failure is logged, never raised."""
        with self._lock:
            clock = next(self._clock)
        event = sent_event(message, queue, clock=clock)
        try:
            producer.publish(
                event, exchange=self._event_exchange.name, routing_key="task.sent",
                declare=[self._event_exchange], retry=False, serializer="json",
                headers={"hostname": event["hostname"]}, delivery_mode=1,
            )
        except self._errors as exc:
            self._reset(producer)
            log.warning("task %s enqueued; its task-sent event was not published (%s)", message.task_id,
                        type(exc).__name__)

    @staticmethod
    def _publish(producer: Any, message: TaskMessage, queue: KombuQueue) -> None:
        def publish(declare: list[KombuQueue]) -> None:
            # The default exchange routes by queue name without consulting bindings: a broker that
            # lost its binding tables (Redis restarted without persistence) still gets the message,
            # where the named exchange would drop it silently.
            producer.publish(
                message.body, exchange="", routing_key=queue.name, declare=declare,
                retry=False, headers=message.headers, content_type=message.content_type,
                content_encoding=message.content_encoding, **message.properties,
            )

        try:
            publish([queue])
        except InconsistencyError:
            # The broker lost the binding kombu remembers declaring (e.g. Redis restarted without
            # persistence): declare again, once, then publish once more.
            queue.bind(producer.channel).declare()
            publish([])

    @staticmethod
    def _reset(producer: Any) -> None:
        """Drop the borrowed connection's channels so the next use reconnects from scratch."""
        conn = getattr(producer, "__connection__", None)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a dead connection may fail; it is reopened on next use
                conn.collect()

    def close(self) -> None:
        """Close every pooled connection; the dispatcher cannot be used afterwards."""
        self._producers.force_close_all()
        self._producers.connections.force_close_all()
        self._connection.release()


@dataclass(frozen=True)
class DispatchedTask:
    """One call recorded by :class:`RecordingDispatcher`."""

    task: str
    args: list[Any]
    queue: str
    task_id: str


@dataclass
class RecordingDispatcher:
    """A dispatcher for tests: records every call, or fails like an unreachable broker.

    Thread-safe. Arguments are checked like :class:`KombuDispatcher` checks them (JSON only).

    Attributes:
        fail: when true, :meth:`enqueue` raises :class:`BrokerUnavailable` and records nothing.
        calls: the successful calls, in order.
        failures: how many calls failed.
    """

    fail: bool = False
    calls: list[DispatchedTask] = field(default_factory=list)
    failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def enqueue(self, task: str, args: list[Any], queue: str) -> str:
        """Record ``task(*args)`` on ``queue`` (see :meth:`Dispatcher.enqueue`)."""
        message = task_message(task, args)
        if not isinstance(queue, str) or not queue:
            raise InvalidInput(f"queue name must be a non-empty string, got {queue!r}")
        with self._lock:
            if self.fail:
                self.failures += 1
                raise BrokerUnavailable("recording dispatcher set to fail")
            self.calls.append(DispatchedTask(task, json.loads(message.body)[0], queue, message.task_id))
        return message.task_id

    def tasks(self, task: str | None = None) -> list[DispatchedTask]:
        """A copy of the recorded calls (of one task name, if given)."""
        with self._lock:
            return [c for c in self.calls if task is None or c.task == task]
