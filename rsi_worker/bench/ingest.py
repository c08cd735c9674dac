"""``rsi bench ingest``: host-side ``RsiClient.record_turn`` throughput, latency, SQL statements per
call and thread scaling (issues 5 and 15; docs/performance/record-path.md).

The real path end to end: world validation (``finalize_world``), one SQL transaction (the agent
upsert, the world with ``seq`` numbering, the trajectory, the amortised retention), the Redis
``try_begin`` script, a Celery protocol v2 publish through :class:`~rsi_common.dispatch.KombuDispatcher`
to the Redis broker for turns that take a lease, and the hand-off mark (batched). No worker consumes
the queue, so each agent's first turn takes the lease (``enqueued``) and its later turns find it held
(``pending``) — both paths are reported separately.

**SQL statements** are counted with SQLAlchemy's ``before_cursor_execute`` event on the client's
engine over the timed calls, the same way on both backends: ``sql_statements_per_call`` is every
statement the engine ran during the timed region (the batched hand-off marks and the amortised
retention included) **without transaction control** — SQLite's ``BEGIN IMMEDIATE``, which SQLAlchemy
emits, is left out as PostgreSQL's ``BEGIN``, which the driver sends, is never seen;
``sql_round_trips_per_call`` counts every request to the database: those statements plus one
``BEGIN`` and one ``COMMIT`` (or ``ROLLBACK``) per transaction (the engine's ``begin``, ``commit`` and
``rollback`` events) plus the pool's pre-ping on each checkout where the engine has one
(PostgreSQL). ``sql_statements_by_outcome`` counts, per call, the statements (no ``BEGIN``) its own
thread ran; ``sql_statements`` splits every statement the engine saw by kind (``INSERT rsi_worlds``,
``BEGIN IMMEDIATE``, …).

**Thread scaling**: each thread count of ``threads`` (e.g. ``(1, 8)``) records its own turns (new
agents) on the same servers, one after the other; the report's top-level figures are those of the
first count and ``scaling`` gives each count's throughput over the first one's. ``client_cpu_ms_per_call``
is the benchmark process's CPU time (all its threads: the checks, SQLAlchemy, the drivers' Python
parts) per call, and ``client_cpu_share`` that CPU time over the wall time: the host's Python code
holds the GIL for most of it, so more threads can raise the throughput by at most about
``1 / client_cpu_share`` of the one-thread run (and not past the cores the servers leave free).

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
import re
import secrets
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import event
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient, redis_client
from rsi_common.config import Settings
from rsi_common.db import make_engine, upgrade
from rsi_common.dispatch import QUEUE_CONSOLIDATE
from rsi_worker.bench.replay import generate_worlds
from rsi_worker.local.servers import PostgresServer, RedisServer

__all__ = [
    "Backend",
    "StatementCounter",
    "bench_ingest",
    "bench_ingest_backends",
    "parse_threads",
    "percentile",
    "scaling",
    "statement_kind",
    "stats_ms",
]

Backend = Literal["sqlite", "postgres"]


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (``0 < q <= 1``): the smallest value with at least ``q`` of
    the values at or below it; NaN for no values."""
    if not 0 < q <= 1:
        raise ValueError("q must be in (0, 1]")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else float("nan")


def stats_ms(values_s: Sequence[float]) -> dict[str, float | int]:
    """``{n, p50_ms, p99_ms, max_ms, mean_ms}`` of durations in seconds (``{n: 0}`` when empty);
    p50 is the median, p99 the nearest-rank 99th percentile."""
    ms = [v * 1000 for v in values_s]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 3), "p99_ms": round(percentile(ms, 0.99), 3),
            "max_ms": round(max(ms), 3), "mean_ms": round(statistics.fmean(ms), 3)}


_KIND = re.compile(r"\s*(?:(INSERT)\s+INTO|(UPDATE)|(DELETE)\s+FROM|(SELECT)\b.*?\bFROM|(\w+))\s*(\w*)",
                   re.IGNORECASE | re.DOTALL)


def statement_kind(sql: str) -> str:
    """``"<VERB> <table>"`` of a statement (``INSERT rsi_worlds``, ``SELECT rsi_runs``,
    ``BEGIN IMMEDIATE``): its first keyword and the table it writes or first reads."""
    m = _KIND.match(sql)
    if m is None:
        return sql.strip().split(" ", 1)[0].upper() or "?"
    verb = next(g for g in m.groups()[:5] if g)
    return f"{verb.upper()} {m.group(6)}".strip()


class StatementCounter:
    """Counts the statements an engine runs (``before_cursor_execute``), in total, by kind, and for
    the calling thread (:meth:`thread_count`). Thread-safe; :meth:`close` removes the listener."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.total = 0
        """Every statement the engine ran, transaction control (``BEGIN IMMEDIATE``) included."""
        self.control = 0
        """Of :attr:`total`, the transaction control statements (``BEGIN …``, ``COMMIT``, ``ROLLBACK``)."""
        self.transactions = Counter[str]()
        """``begin``, ``commit``, ``rollback`` events and ``ping`` (pre-ping checkouts)."""
        self.kinds: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pre_ping = bool(getattr(engine.pool, "_pre_ping", False))
        self._listeners = [(name, self._transaction(name)) for name in ("begin", "commit", "rollback")]
        event.listen(engine, "before_cursor_execute", self._on_execute)
        for name, on in self._listeners:
            event.listen(engine, name, on)
        event.listen(engine.pool, "checkout", self._on_checkout)

    def _on_execute(self, conn: Any, cursor: Any, statement: str, params: Any, context: Any,
                    executemany: bool) -> None:
        kind = statement_kind(statement)
        control = kind.split(" ", 1)[0] in _CONTROL
        self._local.n = getattr(self._local, "n", 0) + 1
        self._local.work = getattr(self._local, "work", 0) + (not control)
        with self._lock:
            self.total += 1
            self.control += control
            self.kinds[kind] += 1

    def _transaction(self, name: str) -> Any:
        def on(conn: Any) -> None:
            with self._lock:
                self.transactions[name] += 1
        return on

    def _on_checkout(self, dbapi_conn: Any, record: Any, proxy: Any) -> None:
        if self._pre_ping:
            with self._lock:
                self.transactions["ping"] += 1

    @property
    def statements(self) -> int:
        """Statements without transaction control (the same count on every backend)."""
        return self.total - self.control

    @property
    def round_trips(self) -> int:
        """:attr:`statements` plus one ``BEGIN`` and one ``COMMIT``/``ROLLBACK`` per transaction
        and the pre-pings: every request to the database."""
        t = self.transactions
        return self.statements + t["begin"] + t["commit"] + t["rollback"] + t["ping"]

    def thread_count(self) -> int:
        """Statements run so far by the calling thread (transaction control included)."""
        return int(getattr(self._local, "n", 0))

    def thread_statements(self) -> int:
        """Statements without transaction control run so far by the calling thread."""
        return int(getattr(self._local, "work", 0))

    def reset(self) -> None:
        with self._lock:
            self.total = 0
            self.control = 0
            self.transactions.clear()
            self.kinds.clear()

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._on_execute)
        for name, on in self._listeners:
            event.remove(self.engine, name, on)
        event.remove(self.engine.pool, "checkout", self._on_checkout)


_CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "END"})


def per_call(total: int, calls: int) -> float | None:
    """Statements per call, rounded to 3 places (``None`` without calls)."""
    return round(total / calls, 3) if calls else None


def scaling(runs: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Each run's ``turns_per_s`` over the first run's, keyed by its thread count (``"8": 2.1``)."""
    if not runs:
        return {}
    base = runs[0].get("turns_per_s")
    return {str(r["threads"]): (round(r["turns_per_s"] / base, 2) if base and r.get("turns_per_s") is not None
                                else None) for r in runs}


def parse_threads(text: str) -> list[int]:
    """``"1,8"`` → ``[1, 8]`` (each ≥ 1, in the given order, duplicates dropped).

    Raises:
        ValueError: empty, not integers, or a count below 1.
    """
    counts = [int(part) for part in text.replace(" ", "").split(",") if part]
    if not counts or min(counts) < 1:
        raise ValueError("thread counts must be integers >= 1, e.g. 1,8")
    return list(dict.fromkeys(counts))


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


def _record_all(client: RsiClient, turns: list[tuple[str, dict[str, Any]]], threads: int,
                counter: StatementCounter | None = None) -> tuple[list[tuple[str, float, int]], float]:
    """Record every turn; returns ``[(outcome, seconds, statements of the call)]`` and the wall time."""
    results: list[tuple[str, float, int]] = []
    lock = threading.Lock()

    def one(item: tuple[str, dict[str, Any]]) -> None:
        before = counter.thread_statements() if counter is not None else 0
        t0 = time.perf_counter()
        rec = client.record_turn(*item)
        dt = time.perf_counter() - t0
        n = counter.thread_statements() - before if counter is not None else 0
        with lock:
            results.append((rec.dispatched, dt, n))

    start = time.perf_counter()
    if threads <= 1:
        for item in turns:
            one(item)
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(one, turns))
    return results, time.perf_counter() - start


def _run(client: RsiClient, counter: StatementCounter, rurl: str, template: list[dict[str, Any]], *,
         n_turns: int, n_agents: int, threads: int, warmup: int) -> dict[str, Any]:
    """One timed run of ``n_turns`` on new agents with ``threads`` callers."""
    prefix = f"bench-{secrets.token_hex(3)}"
    _record_all(client, _turns(warmup, 5, prefix + "-warm", template), threads)
    with contextlib.closing(redis_client(rurl)) as r:
        queued_before = int(r.llen(QUEUE_CONSOLIDATE))
        counter.reset()
        cpu0 = time.process_time()
        results, wall_s = _record_all(client, _turns(n_turns, n_agents, prefix, template), threads, counter)
        cpu_s = time.process_time() - cpu0
        total, trips, kinds = counter.statements, counter.round_trips, dict(counter.kinds)
        queued = int(r.llen(QUEUE_CONSOLIDATE)) - queued_before
    by_outcome: dict[str, list[tuple[float, int]]] = {}
    for outcome, dt, n in results:
        by_outcome.setdefault(outcome, []).append((dt, n))
    overall = stats_ms([dt for _, dt, _ in results])
    return {
        "threads": threads,
        "seconds": round(wall_s, 3),
        "turns_per_s": round(n_turns / wall_s, 1) if wall_s > 0 else None,
        **{k: v for k, v in overall.items() if k != "n"},
        "by_outcome": {k: stats_ms([dt for dt, _ in v]) for k, v in sorted(by_outcome.items())},
        "outcomes": dict(Counter(o for o, _, _ in results)),
        "sql_statements_per_call": per_call(total, n_turns),
        "sql_round_trips_per_call": per_call(trips, n_turns),
        "sql_statements_by_outcome": {k: per_call(sum(n for _, n in v), len(v))
                                      for k, v in sorted(by_outcome.items())},
        "sql_statements": {k: per_call(v, n_turns) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
        "broker_messages": queued,
        "client_cpu_ms_per_call": round(cpu_s / n_turns * 1000, 3),
        "client_cpu_share": round(cpu_s / wall_s, 3) if wall_s > 0 else None,
    }


def bench_ingest(
    db_url: str | None = None,
    redis_url: str | None = None,
    n_turns: int = 10_000,
    n_agents: int = 100,
    *,
    backend: Backend = "sqlite",
    threads: int | Sequence[int] = 1,
    warmup: int = 50,
) -> dict[str, Any]:
    """Measure ``record_turn`` on one database backend (module docstring).

    Args:
        db_url: SQLAlchemy URL; ``None`` starts a private database of ``backend``.
        redis_url: broker and coordination Redis; ``None`` starts a private ``redis-server``.
        n_turns: timed turns per thread count.
        n_agents: agents the turns are spread over (round robin).
        backend: which private database to start when ``db_url`` is ``None``.
        threads: concurrent callers sharing one client (1 = sequential latency), or several counts
            run one after the other on the same servers.
        warmup: untimed turns first (separate agents), per thread count.

    Returns:
        ``{backend, turns, agents, threads, seconds, turns_per_s, p50_ms, p99_ms, max_ms, mean_ms,
        by_outcome {enqueued|pending|…: {n, p50_ms, p99_ms, max_ms, mean_ms}}, outcomes,
        sql_statements_per_call, sql_round_trips_per_call, sql_statements_by_outcome,
        sql_statements {kind: per call},
        broker_messages, client_cpu_ms_per_call, client_cpu_share, world_bytes_mean, world_retention,
        pool_size, runs [the same figures per thread count], scaling {threads: throughput over the
        first count's}}``; latencies in
        milliseconds; the top-level figures are those of the first thread count.
    """
    counts = [threads] if isinstance(threads, int) else list(threads)
    if not counts or min(counts) < 1:
        raise ValueError("threads must be >= 1")
    template = [w.data for w in generate_worlds(6)]
    with _servers(db_url, redis_url, backend) as (db, rurl):
        pool_size = max(5, *counts)
        engine = make_engine(db, pool_size=pool_size, max_overflow=pool_size)
        counter = StatementCounter(engine)
        try:
            upgrade(engine)
            settings = Settings(database_url=db, redis_url=rurl)
            with RsiClient(settings, engine=engine) as client:
                runs = [_run(client, counter, rurl, template, n_turns=n_turns, n_agents=n_agents, threads=t,
                             warmup=warmup) for t in counts]
                kept = client.settings.world_retention
        finally:
            counter.close()
            engine.dispose()
    return {
        "backend": engine.dialect.name,
        "turns": n_turns,
        "agents": n_agents,
        **runs[0],
        "world_bytes_mean": round(statistics.fmean(w["bytes"] for w in template)),
        "world_retention": kept,
        "pool_size": pool_size,
        "runs": runs,
        "scaling": scaling(runs),
    }


def bench_ingest_backends(
    backends: list[Backend], n_turns: int = 10_000, n_agents: int = 100, *,
    threads: int | Sequence[int] = 1, redis_url: str | None = None,
) -> list[dict[str, Any]]:
    """:func:`bench_ingest` on each backend, each with its own private servers (or the given Redis)."""
    return [bench_ingest(None, redis_url, n_turns, n_agents, backend=b, threads=threads) for b in backends]
