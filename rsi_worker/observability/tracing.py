"""Optional OpenTelemetry tracing of Celery tasks (the ``otel`` extra).

Off by default. With ``RSI_OTEL=1`` *and* the extra installed (``pip install 'rsi-worker[otel]'``),
:func:`instrument_celery` turns on ``opentelemetry-instrumentation-celery`` (one span per task
publish and run, linked across the chord). If no tracer provider is configured yet (e.g. by running
under ``opentelemetry-instrument``), an SDK provider named ``rsi-worker`` is installed, exporting
over OTLP when ``opentelemetry-exporter-otlp`` is importable (configured by the standard
``OTEL_EXPORTER_OTLP_*`` variables); otherwise spans are created but go nowhere, and a warning says so.

Nothing here is imported at module import time: with ``RSI_OTEL`` unset no OpenTelemetry
instrumentation or SDK module is loaded. Instrument in the process that runs the tasks: the worker
process with the default ``threads`` pool (``rsi worker`` does it at ``worker_init``); under
``-P prefork`` start the worker with ``opentelemetry-instrument`` instead.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from rsi_common.config import Settings

__all__ = ["instrument_celery"]

log = logging.getLogger(__name__)
SERVICE_NAME = "rsi-worker"


def _module(name: str) -> Any | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _install_provider() -> None:
    trace = _module("opentelemetry.trace")
    sdk = _module("opentelemetry.sdk.trace")
    resources = _module("opentelemetry.sdk.resources")
    if trace is None or sdk is None or resources is None:
        return
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return  # someone (opentelemetry-instrument, the host) configured one already
    provider = sdk.TracerProvider(resource=resources.Resource.create({"service.name": SERVICE_NAME}))
    exporter = _module("opentelemetry.exporter.otlp.proto.http.trace_exporter") or _module(
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
    export = _module("opentelemetry.sdk.trace.export")
    if exporter is not None and export is not None:
        provider.add_span_processor(export.BatchSpanProcessor(exporter.OTLPSpanExporter()))
    else:
        log.warning("RSI_OTEL=1: no OTLP exporter installed; spans are not exported")
    trace.set_tracer_provider(provider)


def instrument_celery(settings: Settings) -> bool:
    """Instrument Celery when ``settings.otel`` is on and the extra is installed.

    Returns:
        Whether instrumentation is active (idempotent: a second call keeps it).
    """
    if not settings.otel:
        return False
    celery_otel = _module("opentelemetry.instrumentation.celery")
    if celery_otel is None:
        log.warning("RSI_OTEL=1 but the otel extra is not installed (pip install 'rsi-worker[otel]'); "
                    "tracing stays off")
        return False
    _install_provider()
    instrumentor = celery_otel.CeleryInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()
    return True
