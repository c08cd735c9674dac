"""Task events that name their queue; task results and arguments that leave a worker as a brief.

**Queue on every event.** Celery puts ``queue`` only on ``task-sent``; Flower and the Celery
Prometheus exporter label a task's later events with the queue their event state last saw. The
``task-sent`` event of a task and the worker's ``task-received`` travel on different connections,
so a fast worker's events can arrive first and be counted under the exporter's default
``queue_name="celery"``. :class:`QueueEventDispatcher` (the app's event dispatcher class) adds the
queue a worker took the message from (its delivery routing key, which is the queue name for every
message of this project) to each ``task-*`` event of that task, from ``task-received`` to the final
one.

**What leaves a worker.** :class:`BriefTask` (the app's task base class) returns, to Celery, only
the scalar fields of a task's return value: a dict keeps its string (cut to
:data:`BRIEF_TEXT_CHARS`), number, boolean and null fields and drops nested values; a string is
cut the same way. That brief is what the result backend stores (and chord bodies receive), and what
``task-succeeded`` events (Flower, the exporter) carry. :class:`BriefAMQP` (the app's message
builder) likewise writes the ``argsrepr`` / ``kwargsrepr`` of every message the app sends — what
task events, ``inspect active`` and Flower show as a task's arguments — from the brief of each
argument: a trial slot's cached replay and a chord body's member results are not shown. A trial's
replay, with the model's answers, and a draft's gate report stay in the database
(docs/operations.md, "What Flower and the result backend see").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from celery import Task, signals
from celery.app.amqp import AMQP
from celery.app.events import Events
from celery.events.dispatcher import EventDispatcher
from celery.utils.saferepr import saferepr

__all__ = ["BRIEF_TEXT_CHARS", "BriefAMQP", "BriefTask", "QueueEventDispatcher", "QueueEvents", "brief",
           "connect_queue_events"]

BRIEF_TEXT_CHARS = 200
"""A text field of a task's result is cut to this many characters when it leaves the worker."""
QUEUES_REMEMBERED = 10_000
"""Tasks whose queue a dispatcher remembers at once (oldest forgotten first)."""
FINAL_EVENTS = frozenset({"task-succeeded", "task-failed", "task-rejected", "task-revoked"})


def _cut(text: str) -> str:
    return text if len(text) <= BRIEF_TEXT_CHARS else text[: BRIEF_TEXT_CHARS - 3] + "..."


def brief(result: Any) -> Any:
    """The part of a task's return value that leaves the worker (module docstring)."""
    if isinstance(result, str):
        return _cut(result)
    if isinstance(result, dict):
        return {str(k): _cut(v) if isinstance(v, str) else v for k, v in result.items()
                if v is None or isinstance(v, (str, int, float, bool))}
    if result is None or isinstance(result, (int, float, bool)):
        return result
    return None


class BriefTask(Task):  # type: ignore[misc]  # Celery ships no type hints
    """The task base class of rsi-worker's app: a task returns :func:`brief` of its value."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return brief(super().__call__(*args, **kwargs))


class BriefAMQP(AMQP):  # type: ignore[misc]
    """Celery's message builder, with ``argsrepr`` / ``kwargsrepr`` made from the :func:`brief` of
    each argument (an explicit ``argsrepr`` / ``kwargsrepr`` is kept)."""

    def as_task_v2(self, task_id: str, name: str, args: Any = None, kwargs: Any = None, *more: Any,
                   **options: Any) -> Any:
        if options.get("argsrepr") is None and isinstance(args, (list, tuple)):
            options["argsrepr"] = saferepr([brief(a) for a in args], self.argsrepr_maxsize)
        if options.get("kwargsrepr") is None and isinstance(kwargs, dict):
            options["kwargsrepr"] = saferepr(brief(kwargs), self.kwargsrepr_maxsize)
        return super().as_task_v2(task_id, name, args, kwargs, *more, **options)


class QueueEventDispatcher(EventDispatcher):  # type: ignore[misc]
    """Celery's event dispatcher, adding ``queue`` to each ``task-*`` event of a task whose queue
    :meth:`note_queue` recorded (module docstring). Thread-safe."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._queues: OrderedDict[str, str] = OrderedDict()
        self._queues_lock = threading.Lock()

    def note_queue(self, task_id: str, queue: str) -> None:
        """Remember that task ``task_id`` was taken from ``queue``."""
        with self._queues_lock:
            self._queues[task_id] = queue
            while len(self._queues) > QUEUES_REMEMBERED:
                self._queues.popitem(last=False)

    def send(self, type: str, *args: Any, **fields: Any) -> Any:
        if type.startswith("task-") and "queue" not in fields:
            with self._queues_lock:
                uuid = fields.get("uuid")
                queue = (self._queues.pop(uuid, None) if type in FINAL_EVENTS
                         else self._queues.get(uuid)) if isinstance(uuid, str) else None
            if queue:
                fields["queue"] = queue
        return super().send(type, *args, **fields)


class QueueEvents(Events):  # type: ignore[misc]
    """``app.events`` of rsi-worker's app: its dispatcher class is :class:`QueueEventDispatcher`."""

    dispatcher_cls = f"{__name__}:QueueEventDispatcher"


def _note_queue(sender: Any = None, request: Any = None, **_: Any) -> None:
    dispatcher = getattr(sender, "event_dispatcher", None)
    queue = (getattr(request, "delivery_info", None) or {}).get("routing_key")
    if isinstance(dispatcher, QueueEventDispatcher) and queue and request is not None:
        dispatcher.note_queue(str(request.id), str(queue))


def connect_queue_events() -> None:
    """Connect the ``task_received`` handler (fired before the ``task-received`` event) that tells
    the consumer's :class:`QueueEventDispatcher` each task's queue. Idempotent."""
    signals.task_received.connect(_note_queue, weak=False, dispatch_uid="rsi-event-queue")
