"""A real ``rsi worker`` process with a real redis-server: one distributed consolidation, then its
``/metrics`` endpoint is scraped and its JSON log lines are parsed (issue 8)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from rsi_common.config import Settings
from rsi_common.db import replay_rows
from rsi_common.dispatch import QUEUE_CONSOLIDATE, TASK_CONSOLIDATE, KombuDispatcher
from rsi_worker.jobs.scenario import CORRECTION
from rsi_worker.local.servers import RedisServer
from tests.support.cluster import REPO, Cluster
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(180)
REQUEST = "Compare laptops: use search query=laptops"


K8S_WORKER = REPO / "deploy" / "k8s" / "worker-replay.yaml"


def pod_name(i: int) -> str:
    return f"obs{i}-{os.getpid()}"


class LoggingCluster(Cluster):
    """Workers started as in the Kubernetes Deployment (``-n rsi@<pod> --no-supervise``) and without
    ``-l``: the level comes from ``RSI_LOG_LEVEL`` (the settings)."""

    def _spawn(self, i: int) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"worker{i}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [sys.executable, "-m", "rsi_worker.cli", "worker", "-c", str(self.concurrency),
             "-n", f"rsi@{pod_name(i)}", "--no-supervise"],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return proc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of the worker's endpoint (empty if not up yet)."""
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def liveness_probe(broker_url: str, pod: str, timeout_s: int | None = None) -> subprocess.Popen[str]:
    """The worker Deployment's liveness command, started as the kubelet would (``sh -c`` in the pod);
    ``timeout_s`` replaces its reply timeout (``-t``): short for a probe that must fail, long for one
    that must pass on a loaded machine (``-d`` names one node: the probe ends at its reply)."""
    spec = yaml.safe_load(K8S_WORKER.read_text(encoding="utf-8"))["spec"]["template"]["spec"]
    command = list(spec["containers"][0]["livenessProbe"]["exec"]["command"])
    if timeout_s is not None:
        assert " -t 10" in command[-1]
        command[-1] = command[-1].replace(" -t 10", f" -t {timeout_s}")
    env = {**os.environ, "RSI_REDIS_URL": broker_url, "POD_NAME": pod,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def test_metrics_endpoint_and_json_logs_of_a_worker(tmp_path: Path, redis_srv: RedisServer) -> None:
    db_url = f"sqlite:///{tmp_path / 'rsi.db'}"
    settings = Settings(database_url=db_url, redis_url=redis_srv.url, model_backoff_s=0, home=tmp_path / "x")
    stack = Stack(settings, redis_client=redis.Redis.from_url(redis_srv.client_url))
    stack.say("shop", "c1", REQUEST)
    io = str(stack.say("shop", "c1", CORRECTION).world["io_id"])
    port = free_port()
    env = {"RSI_METRICS_PORT": str(port), "RSI_LOG_FORMAT": "json", "RSI_LOG_LEVEL": "INFO"}
    with LoggingCluster(tmp_path, db_url, redis_srv.url, n=1, concurrency=4, env=env) as cluster:
        cluster.wait_for("the metrics endpoint", lambda: scrape(port))
        lease = stack.coord.try_begin("shop", io)
        assert lease is not None
        KombuDispatcher(redis_srv.url).enqueue(
            TASK_CONSOLIDATE, [lease.agent, lease.io, lease.token, lease.fence], QUEUE_CONSOLIDATE)
        (run,) = cluster.finished("shop")
        assert run.status == "adopted", (run.reason, run.error)
        # the counter is bumped right after the SQL write: wait for it rather than race it
        samples = cluster.wait_for(
            "the adopted run on /metrics",
            lambda: (s := scrape(port)) and total(s, "rsi_runs_total", status="adopted") == 1 and s)
        dead = liveness_probe(redis_srv.url, "no-such-pod", timeout_s=1)  # no reply: waits out -t
        alive = liveness_probe(redis_srv.url, pod_name(0), timeout_s=60)
        out, err = alive.communicate(timeout=60)
        assert alive.returncode == 0 and "pong" in out, (out, err)
        dead.communicate(timeout=60)
        assert dead.returncode != 0
    summary: dict[str, Any] = run.result or {}
    with stack.sessions() as s:
        rows = replay_rows(s, run.id)
        s.commit()
    assert total(samples, "rsi_runs_total") == 1  # exactly one run, counted once
    assert total(samples, "rsi_replays_total") == len(rows) > 0
    assert total(samples, "rsi_replays_total", status="ok") == sum(1 for r in rows if r.status == "ok")
    assert total(samples, "rsi_replay_latency_seconds_count") > 0
    assert total(samples, "rsi_round_outcomes_total", outcome="ACCEPTED") == 1
    for role, usage in summary["usage"].items():
        assert total(samples, "rsi_model_calls_total", role=role) == usage["calls"]
    for role in ("judge", "proposer"):
        assert total(samples, "rsi_model_calls_total", role=role) > 0
        assert total(samples, "rsi_model_tokens_total", role=role) > 0
    assert total(samples, "rsi_task_redelivery_capped_total") == 0

    raw = (tmp_path / "worker0.log").read_text(encoding="utf-8")
    text = [line for line in raw.splitlines() if line.strip() and not line.startswith("{")]
    # the only plain lines are Celery's signal-handler notices (printed: a signal handler must not log)
    assert all(line.startswith("worker: ") for line in text), text
    records = [json.loads(line) for line in raw.splitlines() if line.startswith("{")]
    assert records and all({"ts", "level", "logger", "message", "run_id", "agent_id", "task"} <= set(r)
                           for r in records)
    closed = [r for r in records if r["run_id"] == run.id and r["agent_id"] == "shop"]
    assert any(r["message"] == f"run {run.id} closed: adopted" for r in closed), raw[-3000:]
    in_replays = [r for r in records if r["task"] == "rsi.replay_trial"]
    assert in_replays and all(r["run_id"] == run.id and r["task_id"] for r in in_replays)
    assert any(r["task"] == TASK_CONSOLIDATE and r["agent_id"] == "shop" for r in records)
    stack.close()
