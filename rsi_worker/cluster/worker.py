"""A worker process's own state: its connections, its metrics server, its delivery counts.

A :class:`WorkerContext` is built with the app (``app.rsi``) and handed to every task; it opens the
process's :class:`~rsi_worker.runtime.Runtime` on first use and again after a fork (a pool child
builds its own), so no connection object is a module global.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import Any

from celery import current_task

from rsi_common.config import Settings
from rsi_common.errors import SettingsError
from rsi_worker.consolidate import ModelFactory, default_models
from rsi_worker.observability.metrics import PrometheusMetrics, metrics_for
from rsi_worker.observability.tracing import instrument_celery
from rsi_worker.runtime import Runtime, open_runtime

__all__ = ["DELIVERY_TTL_S", "WorkerContext", "load_model_factory"]

DELIVERY_TTL_S = 24 * 3600
"""How long a task's delivery count (and a task result) is kept."""
log = logging.getLogger(__name__)


def load_model_factory(settings: Settings) -> ModelFactory:
    """``RSI_MODEL_FACTORY`` (``"module:callable"``, called with the settings) or the default."""
    spec = settings.model_factory
    if not spec:
        return default_models(settings)
    module, _, name = spec.partition(":")
    if not module or not name:
        raise SettingsError(f"RSI_MODEL_FACTORY must look like 'package.module:callable', got {spec!r}")
    factory = getattr(importlib.import_module(module), name)
    built: ModelFactory = factory(settings)
    return built


class WorkerContext:
    """Per-process connection objects of a worker, built on first use (fork-safe)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = metrics_for(settings)
        """This process's metrics (:mod:`rsi_worker.observability.metrics`); served from ``worker_init``."""
        self._metrics_server: Any = None
        self._runtime: Runtime | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def runtime(self) -> Runtime:
        with self._lock:
            if self._runtime is None or self._pid != os.getpid():
                self._runtime = open_runtime(self.settings, models=load_model_factory(self.settings),
                                             metrics=self.metrics)
                self._pid = os.getpid()
            return self._runtime

    def reset(self) -> None:
        """Forget this process's connections (after a fork, or in tests)."""
        with self._lock:
            if self._runtime is not None and self._pid == os.getpid():
                self._runtime.close()
            self._runtime = None

    def count_delivery(self, task_id: str) -> int:
        """How many times the task with ``task_id`` has started (1 on the first delivery)."""
        client = self.runtime().redis
        key = f"rsi:task:{task_id}:deliveries"
        n = int(client.incr(key))
        if n == 1:
            client.expire(key, DELIVERY_TTL_S)
        task = getattr(current_task, "name", None) or "unknown"
        self.metrics.task_delivered(str(task), n, cap=self.settings.max_redeliveries)
        return n

    def start_observability(self, pool: str = "") -> None:
        """Serve ``/metrics`` on ``metrics_port`` and turn on tracing (``RSI_OTEL``); once per process.

        A port that cannot be bound is logged as an error; the worker runs on without metrics.
        """
        port = self.settings.metrics_port
        if isinstance(self.metrics, PrometheusMetrics) and port is not None and self._metrics_server is None:
            if "prefork" in pool.lower() or "processes" in pool.lower():
                log.warning("metrics: prefork pool children's counts are not exported; use -P threads")
            try:
                self._metrics_server = self.metrics.serve(port)
                log.info("metrics served on port %d", port)
            except OSError as exc:
                log.error("metrics port %d not served: %s", port, exc)
        instrument_celery(self.settings)

    def stop_observability(self) -> None:
        """Stop serving ``/metrics`` (worker shutdown)."""
        server, self._metrics_server = self._metrics_server, None
        if server is not None:
            server.shutdown()
            server.server_close()
