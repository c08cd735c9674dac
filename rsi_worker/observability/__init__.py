"""What an operator sees of a worker: structured logs, Prometheus metrics, OpenTelemetry traces.

* :mod:`~rsi_worker.observability.logs` — JSON or text log lines with the task's context, secrets
  redacted;
* :mod:`~rsi_worker.observability.metrics` — the :class:`Metrics` hook interface the pipeline calls
  (:data:`NULL_METRICS` when off) and its Prometheus implementation;
* :mod:`~rsi_worker.observability.tracing` — optional tracing of Celery tasks (``RSI_OTEL``).

This package imports nothing else of ``rsi_worker``: every other package may use it.
"""

from __future__ import annotations

from rsi_worker.observability.logs import configure_logging, connect_task_context
from rsi_worker.observability.metrics import NULL_METRICS, Metrics, PrometheusMetrics, metrics_for
from rsi_worker.observability.tracing import instrument_celery

__all__ = [
    "NULL_METRICS",
    "Metrics",
    "PrometheusMetrics",
    "configure_logging",
    "connect_task_context",
    "instrument_celery",
    "metrics_for",
]
