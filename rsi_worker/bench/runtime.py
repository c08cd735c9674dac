"""``rsi bench runtime``: the agent runtime's latencies (docs/runtime/README.md#benchmarks).

Runs on a private PostgreSQL and redis-server (started and removed by the bench), the inline turn
driver, and a policy stub that answers at once and stamps its first request:

* **spawn call** — ``spawn()`` in its own transaction (admission checks, handle, child row, input
  message, spend row), ``n`` spawns of one root, each from its own logical turn;
* **spawn → child's first model request** — from the spawn's commit to the moment the child's
  turn calls the model (lease, tree slot, reservation, claim, plan, harness resolution), the child's
  turn run at once by the inline driver.

The two cluster rows of the R11 table (1,000 concurrent children on 2 × 64 threads; 20 random
``kill -9`` in a 200-child run) need a multi-worker run and are reported as not measured here.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db import upgrade
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.llm import ModelRequest, ModelResponse, Usage
from rsi_common.runtime.caps import resolve_caps
from rsi_common.runtime.subagents import SpawnRequest, SpecEntry, spawn
from rsi_common.runtime.tree import AgentProfile, register
from rsi_common.runtime.turns import TurnEnv, run_session_turn
from rsi_worker.bench.ingest import StatementCounter
from rsi_worker.local.servers import PostgresServer, RedisServer

__all__ = ["bench_runtime"]

TARGETS = {"spawn_call_p50_ms": 15.0, "spawn_call_p99_ms": 50.0, "spawn_to_model_p50_ms": 40.0,
           "spawn_to_model_p99_ms": 150.0}
CATALOG: dict[str, dict[str, Any]] = {
    "worker": {"description": "does one step", "tools": [], "max_iterations": 2,
               "instructions": "Answer in one line."}}


class _Stamp:
    """A policy stub: answers at once and records when each request arrived (``perf_counter``)."""

    provider, model = "sim", "sim-1"

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.stamps.append(time.perf_counter())
        return ModelResponse(content=[{"type": "text", "text": "ok"}],
                             usage=Usage(input_tokens=10, output_tokens=2), stop_reason="end_turn",
                             model="sim-1")


def _pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q * len(ys)))]


@contextlib.contextmanager
def private_client(prefix: str) -> Iterator[RsiClient]:
    """An :class:`RsiClient` on a private, migrated PostgreSQL and redis-server (a recording
    dispatcher: nothing is sent to a broker); the servers stop and their files go on exit."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        pg = PostgresServer(Path(tmp) / "pg").start()
        rs = RedisServer(Path(tmp) / "redis").start()
        try:
            settings = Settings(database_url=pg.url, redis_url=rs.url, home=Path(tmp) / "home")
            client = RsiClient(settings, redis=redis.Redis.from_url(rs.client_url),
                               dispatcher=RecordingDispatcher())
            upgrade(client.engine)
            try:
                yield client
            finally:
                client.close()
        finally:
            rs.stop()
            pg.stop()


def bench_runtime(n: int = 200) -> dict[str, Any]:
    """Measure the spawn call and spawn → first model request, ``n`` each (module docstring)."""
    with private_client("rsi-bench-runtime-") as client:
        return _measure(client, n)


def _measure(client: RsiClient, n: int) -> dict[str, Any]:
    params = RuntimeParams(max_live_children=n + 1, max_spawns_per_turn=n + 1,
                           tree_spawns_per_day=0, tree_turns_per_day=0, tree_tokens_per_day=0,
                           agent_tokens_per_day=0)
    sessions = client._sessions
    model = _Stamp()
    queue: deque[tuple[str, str]] = deque()
    env = TurnEnv(client, params, model, lambda a, s: queue.append((a, s)))
    with sessions.begin() as s:
        register(s, "bench", AgentProfile(subagents=CATALOG))
    catalog = {k: SpecEntry(str(v["description"]), (), 2) for k, v in CATALOG.items()}
    caps = resolve_caps(params)
    call_ms: list[float] = []
    first_ms: list[float] = []
    counter = StatementCounter(client.engine)
    spawn_stmts = turn_stmts = 0
    for i in range(n):
        req = SpawnRequest("bench", "main", f"main:{i + 1}", "tu", "worker", f"step {i}")
        c0 = counter.thread_count()
        t0 = time.perf_counter()
        with sessions.begin() as s:
            row, _ = spawn(s, params, caps, req, catalog, (), budget=env.budget)
        t1 = time.perf_counter()
        c1 = counter.thread_count()
        call_ms.append((t1 - t0) * 1000)
        before = len(model.stamps)
        out = run_session_turn(env, row.child_agent, row.id)
        spawn_stmts += c1 - c0
        turn_stmts += counter.thread_count() - c1
        if out.outcome != "ran" or len(model.stamps) == before:
            raise RuntimeError(f"the child's turn did not run: {out}")
        first_ms.append((model.stamps[before] - t1) * 1000)
        queue.clear()
    counter.close()
    report: dict[str, Any] = {
        "n": n, "backend": "postgresql",
        "spawn_call_p50_ms": round(statistics.median(call_ms), 2),
        "spawn_call_p99_ms": round(_pct(call_ms, 0.99), 2),
        "spawn_to_model_p50_ms": round(statistics.median(first_ms), 2),
        "spawn_to_model_p99_ms": round(_pct(first_ms, 0.99), 2),
        "spawn_sql_statements": round(spawn_stmts / n, 2),
        "child_turn_sql_statements": round(turn_stmts / n, 2),
        "concurrent_1000_children": "not measured (needs 2 workers x 64 threads)",
        "kill9_200_children": "not measured here; tests/integration/runtime covers one kill -9",
    }
    for key, target in TARGETS.items():
        report[f"{key}_target"] = target
        report[f"{key}_met"] = report[key] <= target
    return report
