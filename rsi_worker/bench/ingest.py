"""``rsi bench ingest``: host-side ``RsiClient.record_turn`` throughput and latency (issue 5).

The real path end to end: world validation (``finalize_world``), one SQL transaction (world with
``seq`` numbering and retention, trajectory, run retention), the Redis ``try_begin`` script, a Celery
protocol v2 publish through :class:`~rsi_common.dispatch.KombuDispatcher` to the Redis broker for
turns that take a lease, and marking the world handed off. No worker consumes the queue, so each
agent's first turn takes the lease (``enqueued``) and its later turns find it held (``pending``) —
both paths are reported separately.

Worlds are real kernel captures: a few live sim turns (latency 0) under H0, cycled through; each
recorded turn gets its own ``io_id``, agent, conversation and clock. Building the turn mapping is
outside the timed region; everything ``record_turn`` does is inside. ``warmup`` turns of a separate
agent set are excluded from the statistics (connection pools, first declarations).

Servers: without URLs, a private ``redis-server`` and (for PostgreSQL) a throw-away cluster are
started under a temporary directory and removed afterwards (``rsi_worker.local.servers``). The private
PostgreSQL runs with ``fsync=off`` — numbers are an upper bound for a durable production server.
Point explicit URLs only at throw-away servers: the benchmark writes agents ``bench-<hex>-<n>`` and
leaves ``consolidate`` messages in the broker.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from rsi_common.client import RsiClient, redis_client
from rsi_common.config import Settings
from rsi_common.db import make_engine, upgrade
from rsi_common.dispatch import QUEUE_CONSOLIDATE
from rsi_worker.bench.replay import generate_worlds
from rsi_worker.local.servers import PostgresServer, RedisServer

__all__ = ["Backend", "bench_ingest", "bench_ingest_backends"]

Backend = Literal["sqlite", "postgres"]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else float("nan")


def _stats_ms(values_s: list[float]) -> dict[str, float | int]:
    ms = [v * 1000 for v in values_s]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 3), "p99_ms": round(_pct(ms, 0.99), 3),
            "max_ms": round(max(ms), 3), "mean_ms": round(statistics.fmean(ms), 3)}


@contextlib.contextmanager
def _servers(db_url: str | None, redis_url: str | None, backend: Backend) -> Iterator[tuple[str, str]]:
    """Yield ``(db_url, redis_url)``, starting private servers for what is not given."""
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rsi-bench-ingest-")))
        if redis_url is None:
            server = RedisServer(tmp / "redis").start()
            stack.callback(server.stop)
            redis_url = server.url
        if db_url is None:
            if backend == "sqlite":
                db_url = f"sqlite:///{tmp / 'bench.db'}"
            else:
                pg = PostgresServer(tmp / "pg").start()
                stack.callback(pg.stop)
                db_url = pg.url
        yield db_url, redis_url


def _turns(n: int, n_agents: int, prefix: str,
           template: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The turn mappings to record (built before timing)."""
    out = []
    for i in range(n):
        agent = f"{prefix}-{i % n_agents}"
        world = dict(template[i % len(template)])
        world.update(agent_id=agent, io_id=f"io-{i}", interaction_id=f"c-{(i // n_agents) % 5}",
                     clock=1_700_000_000.0 + i)
        trajectory = {"trajectory_id": f"t-{prefix}-{i}", "io_id": f"io-{i}", "status": "ok",
                      "termination_reason": "final_answer", "policy_tokens": 321,
                      "steps": {"model_calls": 2, "iterations": 2, "tool_calls": 1, "tool_errors": 0}}
        out.append((agent, {"world": world, "trajectory": trajectory}))
    return out


def _record_all(client: RsiClient, turns: list[tuple[str, dict[str, Any]]],
                threads: int) -> tuple[list[tuple[str, float]], float]:
    """Record every turn; returns ``[(outcome, seconds)]`` and the wall time."""
    results: list[tuple[str, float]] = []
    lock = threading.Lock()

    def one(item: tuple[str, dict[str, Any]]) -> None:
        t0 = time.perf_counter()
        rec = client.record_turn(*item)
        dt = time.perf_counter() - t0
        with lock:
            results.append((rec.dispatched, dt))

    start = time.perf_counter()
    if threads <= 1:
        for item in turns:
            one(item)
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(one, turns))
    return results, time.perf_counter() - start


def bench_ingest(
    db_url: str | None = None,
    redis_url: str | None = None,
    n_turns: int = 10_000,
    n_agents: int = 100,
    *,
    backend: Backend = "sqlite",
    threads: int = 1,
    warmup: int = 50,
) -> dict[str, Any]:
    """Measure ``record_turn`` on one database backend (module docstring).

    Args:
        db_url: SQLAlchemy URL; ``None`` starts a private database of ``backend``.
        redis_url: broker and coordination Redis; ``None`` starts a private ``redis-server``.
        n_turns: timed turns.
        n_agents: agents the turns are spread over (round robin).
        backend: which private database to start when ``db_url`` is ``None``.
        threads: concurrent callers sharing one client (1 = sequential latency).
        warmup: untimed turns first (separate agents).

    Returns:
        ``{backend, turns, agents, threads, seconds, turns_per_s, p50_ms, p99_ms, max_ms, mean_ms,
        by_outcome {enqueued|pending|…: {n, p50_ms, p99_ms, max_ms, mean_ms}}, world_bytes_mean,
        broker_messages, worlds_kept_per_agent}``; latencies in milliseconds.
    """
    template = [w.data for w in generate_worlds(6)]
    prefix = f"bench-{secrets.token_hex(3)}"
    with _servers(db_url, redis_url, backend) as (db, rurl):
        pool = {} if db.startswith("sqlite") else {"pool_size": max(5, threads), "max_overflow": threads}
        engine = make_engine(db, **pool)
        try:
            upgrade(engine)
            settings = Settings(database_url=db, redis_url=rurl)
            with RsiClient(settings, engine=engine) as client:
                _record_all(client, _turns(warmup, 5, prefix + "-warm", template), 1)
                results, wall_s = _record_all(client, _turns(n_turns, n_agents, prefix, template), threads)
                with contextlib.closing(redis_client(rurl)) as r:
                    queued = int(r.llen(QUEUE_CONSOLIDATE))
                kept = client.settings.world_retention
        finally:
            engine.dispose()
    by_outcome: dict[str, list[float]] = {}
    for outcome, dt in results:
        by_outcome.setdefault(outcome, []).append(dt)
    overall = _stats_ms([dt for _, dt in results])
    return {
        "backend": engine.dialect.name,
        "turns": n_turns,
        "agents": n_agents,
        "threads": threads,
        "seconds": round(wall_s, 3),
        "turns_per_s": round(n_turns / wall_s, 1) if wall_s > 0 else None,
        **{k: v for k, v in overall.items() if k != "n"},
        "by_outcome": {k: _stats_ms(v) for k, v in sorted(by_outcome.items())},
        "outcomes": dict(Counter(o for o, _ in results)),
        "world_bytes_mean": round(statistics.fmean(w["bytes"] for w in template)),
        "broker_messages": queued,
        "world_retention": kept,
    }


def bench_ingest_backends(
    backends: list[Backend], n_turns: int = 10_000, n_agents: int = 100, *, threads: int = 1,
    redis_url: str | None = None,
) -> list[dict[str, Any]]:
    """:func:`bench_ingest` on each backend, each with its own private servers (or the given Redis)."""
    return [bench_ingest(None, redis_url, n_turns, n_agents, backend=b, threads=threads) for b in backends]
