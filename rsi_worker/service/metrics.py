"""Prometheus metrics of one service replica, served on ``/metrics`` (viewer scope).

The registry is the replica's own (never the process-global default). Series (prefix ``rsi_api_``):

=================================================  ==============================================
``requests_total{route,method,status}``            answered requests, by route template
``request_seconds{route}``                         wall time until the response started (histogram)
``streams``                                        open event streams (gauge)
``auth_failures_total{status}``                    401 and 403 answers
``rate_limited_total``                             429 answers
``rate_limit_errors_total``                        checks that found Redis unreachable (let through)
=================================================  ==============================================
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

__all__ = ["ServiceMetrics"]

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ServiceMetrics:
    """The replica's registry and series (module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "rsi_api_requests_total", "Answered requests.", ["route", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "rsi_api_request_seconds", "Time to the response start.", ["route"], buckets=_BUCKETS, registry=r
        )
        self.streams = Gauge("rsi_api_streams", "Open event streams.", registry=r)
        self.auth_failures = Counter(
            "rsi_api_auth_failures_total", "401 and 403 answers.", ["status"], registry=r
        )
        self.rate_limited = Counter("rsi_api_rate_limited_total", "429 answers.", registry=r)
        self._limit_errors = 0
        registry = self

        class _LimitErrors:
            def collect(self) -> list[CounterMetricFamily]:
                fam = CounterMetricFamily("rsi_api_rate_limit_errors", "Rate checks without Redis.")
                fam.add_metric([], registry._limit_errors)
                return [fam]

        r.register(_LimitErrors())

    def set_limit_errors(self, n: int) -> None:
        self._limit_errors = n

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)
        if status in (401, 403):
            self.auth_failures.labels(str(status)).inc()
        elif status == 429:
            self.rate_limited.inc()

    def render(self) -> bytes:
        """The exposition text."""
        return generate_latest(self.registry)
