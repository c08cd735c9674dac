"""``rsi.tick`` on the beat schedule and the ``agents`` pool of the deploy files: on only where the
cluster serves queue ``agents`` (docs/runtime/failures.md#beat-and-deploy)."""

from __future__ import annotations

from pathlib import Path

import yaml

from rsi_common.config import RuntimeParams, Settings
from rsi_common.dispatch import QUEUE_AGENTS, QUEUES, TASK_TICK
from rsi_worker.cluster.app import create_app

REPO = Path(__file__).resolve().parents[3]


def test_beat_schedules_the_tick_only_when_the_runtime_is_enabled(tmp_path: Path) -> None:
    off = create_app(Settings(home=tmp_path))
    assert set(off.conf.beat_schedule) == {"rsi-sweep"}
    on = create_app(Settings(home=tmp_path, runtime=RuntimeParams(enabled=True, tick_s=2.5)))
    tick = on.conf.beat_schedule["rsi-tick"]
    assert (tick["task"], tick["schedule"], tick["options"]["queue"]) == (TASK_TICK, 2.5, QUEUE_AGENTS)
    assert tick["options"]["expires"] == 5.0
    assert QUEUE_AGENTS not in QUEUES  # default workers, purge and Flower are unchanged (D15)


def test_the_agents_pool_is_deployed_only_on_request() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    agents = compose["services"]["worker-agents"]
    assert agents["profiles"] == ["agents"] and agents["command"][:3] == ["worker", "-Q", QUEUE_AGENTS]
    assert "threads" in agents["command"]
    assert compose["x-rsi-env"]["RSI_RUNTIME__ENABLED"] == "${RSI_RUNTIME__ENABLED:-false}"
    base = yaml.safe_load((REPO / "deploy/k8s/kustomization.yaml").read_text())
    assert not [r for r in base["resources"] if "agents" in r]
    overlay = yaml.safe_load((REPO / "deploy/k8s/agents/kustomization.yaml").read_text())
    assert overlay["resources"] == ["../", "worker-agents.yaml"]
    assert "RSI_RUNTIME__ENABLED" in overlay["patches"][0]["patch"]
    dep = yaml.safe_load((REPO / "deploy/k8s/agents/worker-agents.yaml").read_text())
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["args"][:3] == ["worker", "-Q", QUEUE_AGENTS] and "threads" in c["args"]
