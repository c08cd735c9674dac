"""Distributed consolidation on real Celery worker processes and a real redis-server (issue 7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from rsi_common.config import Settings
from rsi_common.db import lineage, load_latest_worlds, replay_rows, rollback_to
from rsi_common.dispatch import QUEUE_CONSOLIDATE, TASK_CONSOLIDATE, KombuDispatcher
from rsi_worker.jobs.scenario import CORRECTION
from rsi_worker.local.servers import RedisServer
from tests.support.cluster import Cluster
from tests.support.factories import CALLS_KEY
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(240)
REQUEST = "Compare laptops: use search query=laptops"


def stack_for(tmp_path: Path, db_url: str, server: RedisServer, name: str = "x", **kw: Any) -> Stack:
    settings = Settings(database_url=db_url, redis_url=server.url, model_backoff_s=0, home=tmp_path / name,
                        **kw)
    return Stack(settings, redis_client=redis.Redis.from_url(server.client_url))


def trigger(stack: Stack, agent: str, io: str, server: RedisServer) -> None:
    lease = stack.coord.try_begin(agent, io)
    assert lease is not None
    KombuDispatcher(server.url).enqueue(TASK_CONSOLIDATE, [lease.agent, lease.io, lease.token, lease.fence],
                                        QUEUE_CONSOLIDATE)


def corrected(stack: Stack, agent: str = "shop") -> str:
    stack.say(agent, "c1", REQUEST)
    return str(stack.say(agent, "c1", CORRECTION).world["io_id"])


def test_correction_adopted_on_two_workers(tmp_path: Path, redis_srv: RedisServer, db_url: str) -> None:
    stack = stack_for(tmp_path, db_url, redis_srv)
    io = corrected(stack)
    with Cluster(tmp_path, db_url, redis_srv.url, n=2) as cluster:
        trigger(stack, "shop", io, redis_srv)
        (run,) = cluster.finished("shop")
    assert run.status == "adopted", (run.reason, run.error)
    result = run.result or {}
    rnd = result["round"]
    for key in ("t", "b_t", "sigma", "delta", "S_star", "worlds", "failing", "fresh", "incumbent",
                "candidates", "winner", "failure_modes"):
        assert key in rnd  # every decision input is in the run record
    assert all({"S", "delta_S", "delta_C", "reason", "reason_code"} <= set(c) for c in rnd["candidates"])
    assert stack.current_version("shop") == run.adopted_version
    nxt = stack.say("shop", "c2", "Compare phones: use search query=phones")
    assert nxt.world["harness_version"] == run.adopted_version and "|---" in nxt.answer
    assert not redis.Redis.from_url(redis_srv.client_url).exists("rsi:shop:lease")
    stack.close()


def test_distributed_equals_inline(tmp_path: Path, redis_srv: RedisServer) -> None:
    """Same worlds, signals and sim seed: the cluster and ``--inline`` decide the same."""
    dist = stack_for(tmp_path, f"sqlite:///{tmp_path / 'dist.db'}", redis_srv, "d")
    inline = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'inline.db'}", model_backoff_s=0))
    for stack in (dist, inline):
        stack.say("shop", "ok", "Compare headphones: use search query=headphones", signals={"stars": 5})
        corrected(stack)
    local = inline.consolidate("shop")
    with Cluster(tmp_path, dist.settings.database_url, redis_srv.url, n=2) as cluster:
        trigger(dist, "shop", dist.latest_io("shop"), redis_srv)
        (run,) = cluster.finished("shop")
    remote = run.result or {}

    def essence(summary: dict[str, Any]) -> Any:
        rnd = summary["round"]
        cands = [(c["variant"], c["outcome"], c["S"], c["delta_S"], c["reason_code"])
                 for c in rnd["candidates"]]
        return (summary["status"], summary["version"], rnd["winner"], rnd["S_star"], rnd["delta"], cands)

    assert essence(remote) == essence(local.summary())

    def records(stack: Stack) -> list[dict[str, Any]]:
        """The stored records with world ids (random per database) spelled as their io ids."""
        text = json.dumps([{k: v for k, v in r.items() if k != "ts"} for r in stack.state("shop").records])
        with stack.sessions() as s:
            for w in load_latest_worlds(s, "shop", 100):
                text = text.replace(w.id, str(w.io_id))
        return list(json.loads(text))

    assert records(dist) == records(inline)
    dist.close()
    inline.close()


def test_rollback_during_a_run_is_not_adopted(tmp_path: Path, redis_srv: RedisServer) -> None:
    db_url = f"sqlite:///{tmp_path / 'rsi.db'}"
    stack = stack_for(tmp_path, db_url, redis_srv)
    corrected(stack)
    with Cluster(tmp_path, db_url, redis_srv.url, n=2, env={"RSI_SIM_LATENCY_MS": "150"}) as cluster:
        first = stack.consolidate("shop")
        assert first.status == "adopted"
        stack.say("shop", "c1", "Not quite, cite the source as well")
        trigger(stack, "shop", stack.latest_io("shop"), redis_srv)
        cluster.wait_for("the run to start", lambda: any(r.status == "running" for r in cluster.runs("shop")))
        with stack.sessions() as s:
            rollback_to(s, "shop", None)
            s.commit()
        runs = cluster.finished("shop", n=2)
    assert runs[-1].status == "kept" and runs[-1].reason == "the harness changed during the run; not adopted"
    assert stack.current_version("shop") is None
    with stack.sessions() as s:
        assert [h.version for h in lineage(s, "shop")] == [first.version]
    stack.close()


def test_hopeless_candidate_is_cancelled_across_workers(tmp_path: Path, redis_srv: RedisServer) -> None:
    db_url = f"sqlite:///{tmp_path / 'rsi.db'}"
    stack = stack_for(tmp_path, db_url, redis_srv)
    for i in range(6):
        stack.say("shop", f"ok{i}", "Compare headphones: use search query=headphones", signals={"stars": 5})
    for i in range(2):
        stack.say("shop", f"bad{i}", REQUEST)
        stack.say("shop", f"bad{i}", CORRECTION)
    # the second wave waits for the first however slow the machine: a bound of 30 s (the default)
    # passing first would send it uncancelled, and B's replays would call the model
    env = {"RSI_MODEL_FACTORY": "tests.support.factories:hopeless", "RSI_SIM_LATENCY_MS": "100",
           "RSI_CONSOLIDATION__EARLY_STOP_WAVE_S": "600"}
    with Cluster(tmp_path, db_url, redis_srv.url, n=2, concurrency=2, env=env) as cluster:
        trigger(stack, "shop", stack.latest_io("shop"), redis_srv)
        (run,) = cluster.finished("shop")
    assert run.status == "adopted", (run.reason, run.error)
    b = next(c for c in (run.result or {})["round"]["candidates"] if c["variant"] == "B")
    assert b["early_stopped"] and b["outcome"] == "REJECTED" and b["reason_code"] == "floor"
    with stack.sessions() as s:
        rows = [r for r in replay_rows(s, run.id, "B")]
    cancelled = [r for r in rows if r.status == "cancelled"]
    assert cancelled and len(rows) == 16
    before_start = [r for r in cancelled if "replay" not in (r.result or {})]
    assert before_start  # queued replays saw the flag and never called the model
    calls = int(redis.Redis.from_url(redis_srv.client_url).get(CALLS_KEY) or 0)
    steps = sum(int(((r.result or {}).get("replay") or {}).get("steps") or 0) for r in rows)
    assert calls == steps < 16  # every model call of B belongs to a replay that ran
    stack.close()


def test_kill_9_of_a_worker_during_candidate_replays(tmp_path: Path, redis_srv: RedisServer) -> None:
    db_url = f"sqlite:///{tmp_path / 'rsi.db'}"
    stack = stack_for(tmp_path, db_url, redis_srv)
    inline = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'inline.db'}", model_backoff_s=0))
    for s in (stack, inline):
        s.say("shop", "ok", "Compare headphones: use search query=headphones", signals={"stars": 5})
        corrected(s)
    reference = inline.consolidate("shop").summary()
    env = {"RSI_SIM_LATENCY_MS": "250", "RSI_VISIBILITY_TIMEOUT_S": "8", "RSI_TASK_TIME_LIMIT_S": "6",
           "RSI_TASK_SOFT_TIME_LIMIT_S": "5"}
    with Cluster(tmp_path, db_url, redis_srv.url, n=2, concurrency=4, env=env) as cluster:
        trigger(stack, "shop", stack.latest_io("shop"), redis_srv)

        def candidate_rows() -> int:
            with stack.sessions() as s:
                runs = cluster.runs("shop")
                n = len([r for r in replay_rows(s, runs[0].id) if r.candidate != "incumbent"]) if runs else 0
                s.commit()
            return n

        cluster.wait_for("candidate replays to start", candidate_rows)
        cluster.kill(0)  # kill -9 of a whole worker node with replays in flight
        cluster.restart(0)
        (run,) = cluster.finished("shop", n=1)
    summary = run.result or {}
    assert summary["status"] == reference["status"] == "adopted", (run.reason, run.error)
    assert summary["round"]["winner"] == reference["round"]["winner"]
    scores = [c["S"] for c in summary["round"]["candidates"]]
    assert scores == [c["S"] for c in reference["round"]["candidates"]]
    with stack.sessions() as s:
        rows = replay_rows(s, run.id)
        slots = [(r.candidate, r.world_id, r.trial) for r in rows]
        assert len(slots) == len(set(slots))  # no trial counted twice
        assert len(lineage(s, "shop")) == 1  # no double adoption
    assert stack.state("shop").t == 1
    stack.close()
    inline.close()


def test_consolidate_command_triggers_the_cluster_and_waits(tmp_path: Path, redis_srv: RedisServer) -> None:
    import subprocess
    import sys

    from tests.support.cluster import REPO, worker_env

    db_url = f"sqlite:///{tmp_path / 'rsi.db'}"
    stack = stack_for(tmp_path, db_url, redis_srv)
    corrected(stack)
    with Cluster(tmp_path, db_url, redis_srv.url, n=1):
        done = subprocess.run(
            [sys.executable, "-m", "rsi_worker.cli", "consolidate", "--agent", "shop", "--json"],
            cwd=REPO, env=worker_env(db_url, redis_srv.url, tmp_path / "cli"), capture_output=True,
            text=True, timeout=150)
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout)
    assert [r["status"] for r in records] == ["adopted"] and records[0]["round"]["winner"] in ("A", "B")
    stack.close()


def test_distributed_equals_inline_with_a_regression_set(tmp_path: Path, redis_srv: RedisServer) -> None:
    """Two rounds, the second replaying the lesson of the first: the cluster and ``--inline`` agree on
    every decision, on the lessons replayed and on the lessons learned."""
    dist = stack_for(tmp_path, f"sqlite:///{tmp_path / 'dist.db'}", redis_srv, "d")
    inline = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'inline.db'}", model_backoff_s=0))
    turns = [("c1", REQUEST), ("c1", CORRECTION), ("c2", "Compare phones: use search query=phones"),
             ("c2", "No, keep it brief")]

    def essence(summary: dict[str, Any]) -> Any:
        rnd = summary["round"]
        return (summary["status"], summary["version"], rnd["S_star"], rnd["delta"],
                [(c["variant"], c["outcome"], c["S"], c["reason_code"]) for c in rnd["candidates"]],
                [x["lesson"] for x in rnd.get("lessons", [])], [x["lesson"] for x in rnd.get("learned", [])])

    local, remote = [], []
    with Cluster(tmp_path, dist.settings.database_url, redis_srv.url, n=2) as cluster:
        for n in (2, 4):
            for stack in (dist, inline):
                for conv, text in turns[n - 2:n]:
                    stack.say("shop", conv, text)
            local.append(essence(inline.consolidate("shop").summary()))
            trigger(dist, "shop", dist.latest_io("shop"), redis_srv)
            runs = cluster.finished("shop", n // 2)
            run = max(runs, key=lambda r: r.fence or 0)
            remote.append(essence(run.result or {}))
    assert remote == local
    assert local[0][0] == "adopted" and local[1][5] == local[0][6] != []  # round 2 replays round 1's lesson
    dist.close()
    inline.close()
