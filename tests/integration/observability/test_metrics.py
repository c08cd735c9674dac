"""Worker metrics in-process: the hooks of a real inline consolidation, the sweeper and redelivery
hooks, the no-op default, and the HTTP endpoint a worker context serves (issue 8)."""

from __future__ import annotations

import dataclasses
import socket
import urllib.request
from pathlib import Path

import prometheus_client
import pytest

from rsi_common.config import Settings
from rsi_common.db import get_run, replay_rows
from rsi_worker.cluster.sweeper import SweepReport
from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.consolidate import run_trial
from rsi_worker.consolidate.evaluate import TrialSlot
from rsi_worker.jobs.scenario import CORRECTION
from rsi_worker.observability.metrics import NULL_METRICS, Metrics, PrometheusMetrics, metrics_for
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(120)
REQUEST = "Compare laptops: use search query=laptops"


def value(m: PrometheusMetrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_off_by_default_and_never_the_global_registry() -> None:
    assert metrics_for(Settings()) is NULL_METRICS and not NULL_METRICS.enabled
    NULL_METRICS.run_finished({"status": "adopted"}, rerun=True)  # hooks accept calls and do nothing
    NULL_METRICS.replay_finished({"status": "ok"})
    NULL_METRICS.sweep_done(SweepReport().to_json())
    NULL_METRICS.task_delivered("rsi.consolidate", 9, cap=1)
    a, b = metrics_for(Settings(metrics_port=9999)), metrics_for(Settings(metrics_port=9999))
    assert isinstance(a, PrometheusMetrics) and isinstance(b, PrometheusMetrics)
    assert a.registry is not b.registry and a.registry is not prometheus_client.REGISTRY
    a.run_finished({"status": "kept"})
    assert value(a, "rsi_runs_total", status="kept") == 1 and value(b, "rsi_runs_total", status="kept") == 0
    assert not [m for m in prometheus_client.REGISTRY.collect() if m.name.startswith("rsi_")]
    assert value(a, "rsi_runs_total", status="adopted") == 0  # pre-created series
    assert b"rsi_runs_total" in a.exposition()


def test_inline_consolidation_is_counted_once(tmp_path: Path) -> None:
    stack = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0))
    metrics = PrometheusMetrics()
    stack.deps = dataclasses.replace(stack.deps, metrics=metrics)
    stack.say("shop", "c1", REQUEST)
    stack.say("shop", "c1", CORRECTION)
    result = stack.consolidate("shop")
    assert result.status == "adopted", result.reason
    summary = result.summary()
    assert value(metrics, "rsi_runs_total", status="adopted") == 1
    outcomes = [c["outcome"] for c in summary["round"]["candidates"]]
    assert value(metrics, "rsi_round_outcomes_total", outcome="ACCEPTED") == outcomes.count("ACCEPTED") == 1
    for role, usage in summary["usage"].items():
        assert value(metrics, "rsi_model_calls_total", role=role) == usage["calls"]
        for direction in ("input", "output"):
            tokens = value(metrics, "rsi_model_tokens_total", role=role, direction=direction)
            assert tokens == usage[f"{direction}_tokens"]
    assert value(metrics, "rsi_model_calls_total", role="judge") > 0
    assert value(metrics, "rsi_model_calls_total", role="proposer") > 0
    with stack.sessions() as s:
        rows = replay_rows(s, str(result.run_id))
        params = dict(get_run(s, str(result.run_id)).params or {})
        s.commit()
    by_status: dict[str, int] = {}
    for r in rows:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    for status, n in by_status.items():
        assert value(metrics, "rsi_replays_total", status=status) == n
    ran = [r for r in rows if r.source == "replay" and (r.result or {}).get("replay")]
    assert value(metrics, "rsi_replay_latency_seconds_count") == len(ran) > 0
    assert value(metrics, "rsi_replay_policy_tokens_total") == sum(r.tokens or 0 for r in rows)
    # a redelivered trial returns the stored row: nothing is counted twice
    slot = TrialSlot.from_json(params["slots"]["incumbent"][0])
    before = value(metrics, "rsi_replays_total", status="ok")
    run_trial(stack.deps, str(result.run_id), slot)
    assert value(metrics, "rsi_replays_total", status="ok") == before
    # a run with nothing new to learn from is counted as recorded
    assert stack.consolidate("shop").status == "recorded"
    assert value(metrics, "rsi_runs_total", status="recorded") == 1
    stack.close()


def test_sweeper_and_redelivery_hooks() -> None:
    m = PrometheusMetrics()
    report = SweepReport(runs_checked=4, lease_expired=1, stale=1, leases_deleted=1, worlds_found=7,
                         agents_triggered=2, pending_marked=1, enqueued=1, redis_ok=True)
    m.sweep_done(report.to_json())
    assert value(m, "rsi_sweeps_total") == 1
    assert value(m, "rsi_sweeper_actions_total", kind="lease_expired") == 1
    assert value(m, "rsi_sweeper_actions_total", kind="agents_triggered") == 2
    assert value(m, "rsi_sweeper_actions_total", kind="worlds_found") == 0  # an observation, not an action
    assert value(m, "rsi_runs_total", status="interrupted") == 2
    assert value(m, "rsi_lease_contention_total", source="sweeper") == 1
    m.run_finished({"status": "kept"}, rerun=True)
    assert value(m, "rsi_pending_reruns_total") == 1
    assert value(m, "rsi_lease_contention_total", source="run") == 1
    for delivery in (1, 2, 3, 4, 5):
        m.task_delivered("rsi.replay_trial", delivery, cap=3)
    assert value(m, "rsi_task_redeliveries_total", task="rsi.replay_trial") == 4
    assert value(m, "rsi_task_redelivery_capped_total", task="rsi.replay_trial") == 1
    m.replay_finished({"status": "cancelled", "result": {"reason": "cancelled before the replay"}})
    m.replay_finished({"status": "cancelled", "source": "replay", "result": {"replay": {"seconds": 0.3}}})
    assert value(m, "rsi_early_stop_cancellations_total", when="before") == 1
    assert value(m, "rsi_early_stop_cancellations_total", when="during") == 1
    assert value(m, "rsi_replay_latency_seconds_count") == 1


def test_worker_context_serves_its_registry(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    ctx = WorkerContext(Settings(metrics_port=port))
    assert isinstance(ctx.metrics, PrometheusMetrics)
    ctx.metrics.run_finished({"status": "adopted"})
    ctx.start_observability(pool="threads")
    try:
        ctx.start_observability(pool="threads")  # once per process
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'rsi_runs_total{status="adopted"} 1.0' in body
        busy = WorkerContext(Settings(metrics_port=port))
        with caplog.at_level("ERROR", logger="rsi_worker.cluster.worker"):
            busy.start_observability()  # the port is taken: logged, the worker goes on
        assert any("not served" in r.getMessage() for r in caplog.records)
    finally:
        ctx.stop_observability()
    assert isinstance(WorkerContext(Settings()).metrics, Metrics)
