"""The Celery app factory and queue routing (docs/architecture.md#1-shape,
docs/protocol.md#redis-key-protocol, docs/architecture.md#5-modes).

One app per process, built from :class:`~rsi_common.config.Settings` by :func:`create_app`; the
tasks of :mod:`rsi_worker.cluster.tasks` are registered on it. Connection objects (database engine,
Redis client, coordinator) are built lazily per *process* by the app's
:class:`~rsi_worker.cluster.worker.WorkerContext` (``app.rsi``) — a forked pool child builds its
own — and are never module globals.

Delivery contract (at-least-once): ``task_acks_late`` with ``worker_prefetch_multiplier = 1``
and ``task_reject_on_worker_lost``: a task whose worker dies is delivered again (at once when a
pool child dies, after ``visibility_timeout_s`` when the whole node dies). Every task is
idempotent (see each task's docstring); the task wrapper (:mod:`rsi_worker.cluster.middleware`)
counts every delivery and caps redeliveries.

Celery's own tools (``celery -A``, Flower) load the module-level app of
:mod:`rsi_worker.cluster.celery_app` (``celery -A rsi_worker.cluster.celery_app …``), which
:func:`app_from_env` builds on first use. The app's queues (``task_queues``) are the project's
(:data:`~rsi_common.dispatch.QUEUES`), so ``celery purge`` and Flower's broker view default to them.
Task events (off unless ``RSI_TASK_EVENTS``) name their queue; task results and the argument reprs
of sent tasks leave a worker as a brief (:mod:`rsi_worker.cluster.events`). Results are stored only
for tasks registered with ``ignore_result=False`` (the dream episodes, whose group a cycle waits on):
nobody reads the others (docs/performance/consolidation.md#rsi-bench-scale).
"""

from __future__ import annotations

import gc
from typing import Any

from celery import Celery, signals

from rsi_common.config import Settings
from rsi_common.coord import DELIVERY_TTL_S
from rsi_common.dispatch import QUEUE_CONSOLIDATE, QUEUE_JUDGE, QUEUES, TASK_QUEUES, TASK_SWEEP, celery_queue
from rsi_common.errors import SettingsError
from rsi_worker.cluster.dream_tasks import register_dream
from rsi_worker.cluster.events import BriefAMQP, BriefTask, QueueEvents, connect_queue_events
from rsi_worker.cluster.runtime_beat import runtime_beat
from rsi_worker.cluster.tasks import register
from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.observability.logs import connect_task_context

__all__ = ["TASK_ROUTES", "app_from_env", "broker_urls", "create_app"]

TASK_ROUTES: dict[str, dict[str, str]] = {
    **{name: {"queue": queue} for name, queue in TASK_QUEUES.items()},
    "celery.accumulate": {"queue": QUEUE_JUDGE},
}
"""Task name → queue (``rsi_common.dispatch.TASK_QUEUES``), and Celery's own ``celery.accumulate``,
which joins a replaced chord member's group (a passed draft's trials) into the chord, on ``judge``.
``replay`` carries the fan-out; ``judge`` the chord bodies."""


def broker_urls(settings: Settings) -> tuple[str, str]:
    """``(broker, result backend)``: Redis when ``RSI_REDIS_URL`` is set, else in-memory."""
    if settings.redis_url:
        return settings.redis_url, settings.redis_url
    return "memory://", "cache+memory://"


def _worker_context(sender: Any) -> WorkerContext | None:
    ctx = getattr(getattr(sender, "app", None), "rsi", None)
    return ctx if isinstance(ctx, WorkerContext) else None


def _on_worker_init(sender: Any = None, **_: Any) -> None:
    ctx = _worker_context(sender)
    if ctx is not None:
        ctx.start_observability(pool=str(getattr(sender, "pool_cls", "")))
    # Everything imported at start-up lives for the whole process: move it out of the garbage
    # collector's generations so a full collection does not stall a short task (no-signal runs).
    gc.collect()
    gc.freeze()


def _on_worker_shutdown(sender: Any = None, **_: Any) -> None:
    ctx = _worker_context(sender)
    if ctx is not None:
        ctx.stop_observability()


def create_app(settings: Settings, *, name: str = "rsi") -> Celery:
    """The Celery app of ``settings`` with rsi-worker's tasks registered.

    Celery settings: late acks, prefetch 1, reject on worker lost, JSON only, per-queue routing,
    visibility timeout above the hard time limit, soft/hard time limits, task events only when
    ``task_events`` is set, results ignored except where a task keeps them (chord members still join:
    Celery's Redis backend counts a chord from its own join keys, never from stored results), and
    the sweeper on the beat schedule every ``sweep_interval_s``.
    """
    broker, backend = broker_urls(settings)
    app = Celery(name, broker=broker, backend=backend, set_as_current=False, events=QueueEvents,
                 task_cls=BriefTask, amqp=BriefAMQP)
    # Unacked messages of a dead worker come back after the visibility timeout: scan for them on
    # every restore cycle (kombu's default throttle would make that ~100 s), and never let a dead
    # worker's restore mutex block the others for longer than a few cycles.
    transport = {
        "visibility_timeout": settings.visibility_timeout_s,
        "unacked_restore_throttle": 1,
        "unacked_restore_interval": max(1, min(10, settings.visibility_timeout_s // 4)),
        "unacked_mutex_expire": max(5, min(60, settings.visibility_timeout_s // 2)),
    }
    app.conf.update(
        task_queues=[celery_queue(q) for q in QUEUES],
        task_default_queue=QUEUE_CONSOLIDATE,
        task_routes=TASK_ROUTES,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        broker_connection_retry_on_startup=True,
        task_soft_time_limit=settings.task_soft_time_limit_s,
        task_time_limit=settings.task_time_limit_s,
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
        task_ignore_result=True,
        result_expires=DELIVERY_TTL_S,
        worker_hijack_root_logger=False,
        beat_schedule={"rsi-sweep": {"task": TASK_SWEEP, "schedule": settings.sweep_interval_s},
                       **runtime_beat(settings)},
    )
    ctx = WorkerContext(settings)
    app.rsi = ctx
    # Celery's signals are process-wide: each handler finds the app's own context through the sender.
    signals.worker_init.connect(_on_worker_init, weak=False, dispatch_uid="rsi-worker-init")
    signals.worker_shutdown.connect(_on_worker_shutdown, weak=False, dispatch_uid="rsi-worker-shutdown")
    connect_task_context()
    connect_queue_events()
    register(app, ctx)
    register_dream(app, ctx)
    return app


def app_from_env() -> Any:
    """The app of this process's environment: what ``rsi_worker.cluster.celery_app.app`` (the app
    ``celery -A rsi_worker.cluster.celery_app`` and Flower load) is built with on first use.

    Raises:
        SettingsError: invalid settings, or no ``RSI_REDIS_URL``: a Celery process started this way
            must never fall back to an in-memory broker that no host publishes to.
    """
    settings = Settings()
    if not settings.redis_url:
        raise SettingsError("RSI_REDIS_URL is not set: a worker started with celery -A needs the broker URL")
    return create_app(settings)
