"""Prometheus metrics of a worker process (docs/protocol.md#redis-key-protocol, issue 8).

The pipeline reports what happened through a small :class:`Metrics` object carried in
:class:`~rsi_worker.consolidate.Deps` (``deps.metrics``) and in the worker context
(``WorkerContext.metrics``). This base class is the no-op used whenever metrics are off
(``RSI_METRICS_PORT`` unset, ``rsi consolidate --inline``, embedded mode, tests), so library code
calls its hooks unconditionally. :class:`PrometheusMetrics` records into a
:class:`~prometheus_client.CollectorRegistry` it owns — never the process-global default registry —
and the worker serves it on ``settings.metrics_port`` (:meth:`PrometheusMetrics.serve`).

Hooks take plain JSON-shaped values (a run summary, a trial row, a sweep report), so this module
imports nothing from the pipeline.

Exported series (all prefixed ``rsi_``):

==============================================  =====================================================
``runs_total{status}``                          closed runs: adopted, kept, recorded, failed, skipped,
                                                interrupted (lease lost, or closed by the sweeper)
``round_outcomes_total{outcome}``               candidates judged: ACCEPTED, LOST, REJECTED, gate codes
``replays_total{status}``                       trial rows stored (ok, missing, cancelled) and trial
                                                tasks that failed before storing one (error)
``replay_latency_seconds``                      wall time of replays that ran (histogram)
``replay_policy_tokens_total``                  policy tokens spent by replays
``model_calls_total{role}``                     role model calls of closed runs (judge, signal, …)
``model_tokens_total{role,direction}``          their input / output tokens
``early_stop_cancellations_total{when}``        candidate trials cancelled ``before`` / ``during`` replay
``lease_contention_total{source}``              hand-offs that found the agent's lease held: ``run``
                                                (turns arrived during a run), ``sweeper``
``pending_reruns_total``                        re-runs handed on by a finishing run
``sweeps_total``, ``sweeper_actions_total{kind}``  sweeper passes and what they did (SweepReport counts)
``task_redeliveries_total{task}``               deliveries after the first of one task id
``task_redelivery_capped_total{task}``          deliveries answered by the redelivery cap
==============================================  =====================================================

A process serves only its own registry: with the default ``threads`` pool every task runs in the
worker process. Under ``-P prefork`` the pool children's counts are not exported (a warning is
logged at start); use the threads pool (model calls are I/O bound) where metrics matter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, start_http_server

from rsi_common.config import Settings

__all__ = ["NULL_METRICS", "RUN_STATUSES", "Metrics", "PrometheusMetrics", "metrics_for"]

RUN_STATUSES = ("adopted", "kept", "recorded", "failed", "skipped", "interrupted")
"""Statuses pre-created at zero so dashboards see every series from the start."""
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
SWEEP_NOT_ACTIONS = frozenset({"runs_checked", "worlds_found", "leases_checked", "pending_checked",
                               "redis_ok"})
"""SweepReport fields that are observations, not actions."""


class Metrics:
    """The hook interface; this base class records nothing (metrics off)."""

    enabled = False

    def run_finished(self, summary: Mapping[str, Any], *, rerun: bool = False) -> None:
        """A run was closed with ``summary`` (``ConsolidationResult.summary()`` as written).

        Args:
            summary: ``status``, ``round.candidates[].outcome`` and ``usage`` are read.
            rerun: the run handed its lease on to exactly one re-run (a turn found the lease held).
        """

    def replay_finished(self, row: Mapping[str, Any]) -> None:
        """A trial row was stored (``row_json`` shape), or a trial task failed (``{"status": "error"}``)."""

    def sweep_done(self, report: Mapping[str, Any]) -> None:
        """One sweeper pass finished with ``report`` (``SweepReport.to_json()``)."""

    def task_delivered(self, task: str, delivery: int, *, cap: int) -> None:
        """Task ``task`` started its ``delivery``-th delivery; more than ``cap + 1`` is capped."""


NULL_METRICS = Metrics()
"""The shared no-op (stateless)."""


class PrometheusMetrics(Metrics):
    """Counters and histograms in a registry owned by this object.

    Args:
        registry: where to register (default: a new, private :class:`CollectorRegistry`).
    """

    enabled = True

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, list(labels), registry=r)

        self.runs = counter("rsi_runs", "Closed consolidation runs by status.", "status")
        self.outcomes = counter("rsi_round_outcomes", "Judged candidates by outcome.", "outcome")
        self.replays = counter("rsi_replays", "Replay trials by status.", "status")
        self.latency = Histogram("rsi_replay_latency_seconds", "Wall time of replays that ran, in seconds.",
                                 buckets=LATENCY_BUCKETS_S, registry=r)
        self.policy_tokens = counter("rsi_replay_policy_tokens", "Policy tokens spent by replays.")
        self.model_calls = counter("rsi_model_calls", "Role model calls of closed runs.", "role")
        self.model_tokens = counter("rsi_model_tokens", "Role model tokens of closed runs.",
                                    "role", "direction")
        self.cancellations = counter("rsi_early_stop_cancellations",
                                     "Candidate trials cancelled by early stop.", "when")
        self.contention = counter("rsi_lease_contention", "Hand-offs that found the agent's lease held.",
                                  "source")
        self.reruns = counter("rsi_pending_reruns", "Re-runs handed on by finishing runs.")
        self.sweeps = counter("rsi_sweeps", "Sweeper passes.")
        self.sweep_actions = counter("rsi_sweeper_actions", "Sweeper actions by kind.", "kind")
        self.redeliveries = counter("rsi_task_redeliveries", "Task deliveries after the first.", "task")
        self.capped = counter("rsi_task_redelivery_capped", "Deliveries answered by the redelivery cap.",
                              "task")
        self.spend = counter("rsi_consolidation_tokens", "Tokens spent by closed runs (roles and replays).")
        self.spend_capped = counter("rsi_spend_capped_runs", "Runs stopped by a spend cap.", "when")
        for status in RUN_STATUSES:
            self.runs.labels(status)
        for when in ("before", "during"):
            self.cancellations.labels(when)

    def run_finished(self, summary: Mapping[str, Any], *, rerun: bool = False) -> None:
        self.runs.labels(str(summary.get("status") or "unknown")).inc()
        for cand in (summary.get("round") or {}).get("candidates") or []:
            self.outcomes.labels(str(cand.get("outcome") or "unknown")).inc()
        for role, usage in (summary.get("usage") or {}).items():
            self.model_calls.labels(role).inc(int(usage.get("calls", 0)))
            self.model_tokens.labels(role, "input").inc(int(usage.get("input_tokens", 0)))
            self.model_tokens.labels(role, "output").inc(int(usage.get("output_tokens", 0)))
        spend = summary.get("spend") or {}
        self.spend.inc(int(spend.get("tokens") or 0))
        if spend.get("capped"):
            when = "before" if "before the run" in str(summary.get("reason") or "") else "during"
            self.spend_capped.labels(when).inc()
        if rerun:
            self.reruns.inc()
            self.contention.labels("run").inc()

    def replay_finished(self, row: Mapping[str, Any]) -> None:
        status = str(row.get("status") or "unknown")
        self.replays.labels(status).inc()
        result = row.get("result") or {}
        replay = result.get("replay") if isinstance(result, Mapping) else None
        if status == "cancelled":
            self.cancellations.labels("during" if replay else "before").inc()
        if replay and row.get("source", "replay") == "replay":
            self.latency.observe(max(0.0, float(replay.get("seconds") or 0.0)))
        if row.get("tokens"):
            self.policy_tokens.inc(int(row["tokens"]))

    def sweep_done(self, report: Mapping[str, Any]) -> None:
        self.sweeps.inc()
        for kind, value in report.items():
            countable = isinstance(value, int) and not isinstance(value, bool)
            if kind in SWEEP_NOT_ACTIONS or not countable or not value:
                continue
            self.sweep_actions.labels(kind).inc(value)
        closed = int(report.get("lease_expired", 0)) + int(report.get("stale", 0))
        if closed:
            self.runs.labels("interrupted").inc(closed)
        if report.get("pending_marked"):
            self.contention.labels("sweeper").inc(int(report["pending_marked"]))

    def task_delivered(self, task: str, delivery: int, *, cap: int) -> None:
        if delivery > 1:
            self.redeliveries.labels(task).inc()
        if delivery > cap + 1:
            self.capped.labels(task).inc()

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (what ``/metrics`` serves)."""
        return generate_latest(self.registry)

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        """Serve ``/metrics`` of this registry on ``addr:port`` from a daemon thread.

        Returns:
            The HTTP server; ``shutdown()`` then ``server_close()`` stop it.

        Raises:
            OSError: the port cannot be bound.
        """
        server, _thread = start_http_server(port, addr, registry=self.registry)
        return server


def metrics_for(settings: Settings) -> Metrics:
    """A fresh :class:`PrometheusMetrics` when ``settings.metrics_port`` is set, else :data:`NULL_METRICS`."""
    return PrometheusMetrics() if settings.metrics_port is not None else NULL_METRICS
