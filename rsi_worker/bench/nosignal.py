"""No-signal consolidation task time (``rsi bench consolidate``, measurement 6).

Most turns carry no signal: their ``consolidate`` task opens the run, loads the agent's state and
world pool, finds nothing new to learn from and writes a ``recorded`` result. This measures that
task's work in-process with the very step functions the task calls — :func:`open_run` then
:func:`finalize` — on the benchmark's real SQLite database and real redis-server.

The agent is a mature one: it first learned from ``rounds`` user corrections (each a real round at
sim latency 0, so its stored state carries edit records, a scoreboard, replay and verdict caches),
then holds a full world pool (``world_pool`` = 60 worlds, one conversation each, every fifth an
accepted answer with ``stars`` 5). One warm-up run marks the signals seen; then, alternately, two
kinds of timed runs, each preceded (untimed) by its turn and lease (``try_begin``, as the host does)
and timed from the task's start to the end of its final write and lease release:

* **new conversation**: the turn is the first of a new conversation and carries no signal; nothing
  is to be read;
* **follow-up turn**: the next turn of the conversation just started, a neutral follow-up
  (:data:`FOLLOW_UP`): the implicit-signal reader reads the pair (one model call, the sim at latency
  0 here — a real reader adds its own latency), its ``neutral`` verdict is stored on the previous
  world, and there is still nothing to learn.

Both series use the sim at latency 0 (the task's own work is measured); each reports the reader's
calls per run.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rsi_common.db import save_world
from rsi_common.llm import make_client
from rsi_worker.bench.ingest import StatementCounter, percentile
from rsi_worker.consolidate import Deps, open_run
from rsi_worker.consolidate.flow import close
from rsi_worker.jobs.scenario import CORRECTION, conversation_turn, next_history
from rsi_worker.runtime import Runtime

__all__ = ["RoundTrips", "Sample", "bench_no_signal", "bench_no_signal_private", "series"]

AGENT = "quiet"
TOPICS = ("laptops", "phones", "headphones", "monitors", "tablets", "cameras")
CORRECTIONS = (CORRECTION, "Not quite, cite the source as well", "No, keep it brief",
               "Actually, use bullet points instead")


class _Turns:
    """Live sim turns (latency 0) of new single-turn conversations, stored as worlds."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        quick = rt.settings.model_copy(update={"sim": rt.settings.sim.model_copy(update={"latency_ms": 0.0})})
        self.policy = make_client("sim", "sim-1", quick, role="policy")
        self.n = 0
        self.convs: dict[str, tuple[str, int, list[dict[str, Any]]]] = {}

    def add(self, signals: dict[str, Any] | None = None, *, follow_up: tuple[str, str] | None = None) -> str:
        """Store a new conversation's first turn, or (``follow_up = (io, text)``) the next turn of the
        conversation of ``io``; returns the new turn's io id."""
        self.n += 1
        if follow_up is None:
            topic = TOPICS[self.n % len(TOPICS)]
            history: list[dict[str, Any]] = []
            conv, n, text = f"q{self.n}", 1, f"Compare {topic}: use search query={topic}"
        else:
            conv, n, history = self.convs[follow_up[0]]
            n, text = n + 1, follow_up[1]
        turn = conversation_turn(self.policy, None, AGENT, conv, n, text, history,
                                 clock=1_700_000_000.0 + self.n)
        assert turn.world is not None
        io = str(turn.world["io_id"])
        self.convs[io] = (conv, n, next_history(history, text, turn.answer))
        with self.rt.sessions() as s:
            save_world(s, AGENT, turn.world, signals or {}, retention=self.rt.settings.world_retention,
                       enqueued=True)
            s.commit()
        return io


Sample = tuple[float, float, str, int, float]
"""One run: ``(open_run s, finalize s, status, signal reader calls, CPU s of the task's thread)``."""


class RoundTrips:
    """Requests this thread sends to Redis while counting (``with RoundTrips() as trips:``,
    ``trips.n``): each ``send_packed_command`` of a redis-py connection is one round trip — a single
    command, a script call, or a whole pipeline (whose ``SCRIPT EXISTS`` check is a send of its own).
    Counted on the client, so the commands a script runs inside the server are not counted, nor
    other threads' (the harness listener, the checkpointer)."""

    def __init__(self) -> None:
        self.n = 0
        self._thread = threading.get_ident()
        self._orig: Any = None

    def __enter__(self) -> RoundTrips:
        from redis.connection import AbstractConnection

        orig: Any = AbstractConnection.send_packed_command
        self._orig = orig
        counter = self

        def counted(conn: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == counter._thread:
                counter.n += 1
            return orig(conn, *args, **kwargs)

        setattr(AbstractConnection, "send_packed_command", counted)  # noqa: B010 (a method, patched)
        return self

    def __exit__(self, *exc: object) -> None:
        from redis.connection import AbstractConnection

        setattr(AbstractConnection, "send_packed_command", self._orig)  # noqa: B010


def _one(rt: Runtime, deps: Deps, io: str, trips: RoundTrips | None = None,
         per_run: list[int] | None = None) -> Sample:
    """One run for ``io`` (:data:`Sample`); with ``trips`` (counting), its Redis round trips are
    appended to ``per_run`` (the untimed lease's ``try_begin`` left out)."""
    lease = rt.coord.try_begin(AGENT, io)
    if lease is None:
        raise RuntimeError(f"the lease of {AGENT} is held")
    sent = trips.n if trips is not None else 0
    cpu = time.thread_time()
    t0 = time.perf_counter()
    nxt = open_run(deps, lease)
    t1 = time.perf_counter()
    if nxt.kind != "final" or nxt.result is None:
        raise RuntimeError(f"a no-signal run went on to {nxt.kind!r}")
    result, rerun = close(deps, nxt)
    t2 = time.perf_counter()
    cpu = time.thread_time() - cpu
    if trips is not None and per_run is not None:
        per_run.append(trips.n - sent)
    if result is None:
        raise RuntimeError("a no-signal run found its row written by another delivery")
    if rerun is not None:
        raise RuntimeError("a no-signal run asked for a re-run")
    calls = int(((result.usage or {}).get("signal") or {}).get("calls") or 0)
    return t1 - t0, t2 - t1, result.status, calls, cpu


def series(samples: Sequence[Sample]) -> dict[str, Any]:
    """Summary of runs (:data:`Sample`): medians and the nearest-rank p99 of the total wall time, the
    median CPU time of the task's thread (``time.thread_time``: moves less with the machine's load
    than wall time), in milliseconds."""
    if not samples:
        raise ValueError("no runs")
    opened = [s[0] * 1000 for s in samples]
    final = [s[1] * 1000 for s in samples]
    total = [(s[0] + s[1]) * 1000 for s in samples]
    statuses: dict[str, int] = {}
    for s in samples:
        statuses[s[2]] = statuses.get(s[2], 0) + 1
    return {
        "runs": len(total),
        "median_ms": round(statistics.median(total), 3),
        "p99_ms": round(percentile(total, 0.99), 3),
        "max_ms": round(max(total), 3),
        "open_median_ms": round(statistics.median(opened), 3),
        "finalize_median_ms": round(statistics.median(final), 3),
        "cpu_median_ms": round(statistics.median(s[4] * 1000 for s in samples), 3),
        "signal_calls_per_run": round(sum(s[3] for s in samples) / len(total), 3),
        "statuses": statuses,
    }


def _learn(rt: Runtime, turns: _Turns, rounds: int) -> list[str]:
    """``rounds`` corrections, each consolidated in-process at sim latency 0; their statuses."""
    from rsi_worker.consolidate import SerialExecutor, consolidate_inline

    quick = _quick(rt)
    statuses: list[str] = []
    for i in range(rounds):
        first = turns.add()
        io = turns.add(follow_up=(first, CORRECTIONS[i % len(CORRECTIONS)]))
        lease = rt.coord.try_begin(AGENT, io)
        if lease is None:
            raise RuntimeError(f"the lease of {AGENT} is held")
        statuses += [r.status for r in consolidate_inline(quick, lease, SerialExecutor())]
    return statuses


FOLLOW_UP = "And what about {topic}? use search query={topic}"
"""A follow-up message the implicit-signal reader reads as ``neutral`` (no correction, no thanks)."""


def bench_no_signal(rt: Runtime, runs: int = 200, *, rounds: int = 3) -> dict[str, Any]:
    """Time ``runs`` no-signal runs for new conversations, then ``runs`` for follow-up turns, of an
    agent that learned from ``rounds`` corrections (module docstring).

    Returns:
        ``{new: {...}, follow_up: {...}, <new's keys at the top level>, reasons, worlds, learned,
        state_bytes}``; each series ``{runs, median_ms, p99_ms, max_ms, open_median_ms,
        finalize_median_ms, cpu_median_ms, signal_calls_per_run, statuses, sql_statements_per_run,
        sql_statements, redis_round_trips_per_run}`` (:class:`RoundTrips`, the untimed lease's
        ``try_begin`` left out).
    """
    turns = _Turns(rt)
    learned = _learn(rt, turns, rounds)
    deps = _quick(rt)
    pool = rt.settings.consolidation.world_pool
    for i in range(pool):
        turns.add({"stars": 5} if i % 5 == 0 else None)
    _one(rt, deps, turns.add())  # warm-up: marks the accepted signals seen
    new: list[Sample] = []
    follow_up: list[Sample] = []
    counter = StatementCounter(rt.engine)
    statements: dict[str, Counter[str]] = {"new": Counter(), "follow_up": Counter()}
    redis: dict[str, list[int]] = {"new": [], "follow_up": []}
    try:
        with RoundTrips() as trips:
            for i in range(max(1, runs)):  # alternate, so the follow-up's first turn is in the pool
                io = turns.add()
                counter.reset()
                new.append(_one(rt, deps, io, trips, redis["new"]))
                statements["new"].update(counter.kinds)
                nxt = turns.add(follow_up=(io, FOLLOW_UP.format(topic=TOPICS[i % len(TOPICS)])))
                counter.reset()
                follow_up.append(_one(rt, deps, nxt, trips, redis["follow_up"]))
                statements["follow_up"].update(counter.kinds)
    finally:
        counter.close()
    n = len(new)
    return {
        "new": {**series(new), **_per_run(statements["new"], n),
                "redis_round_trips_per_run": round(sum(redis["new"]) / n, 2)},
        "follow_up": {**series(follow_up), **_per_run(statements["follow_up"], n),
                      "redis_round_trips_per_run": round(sum(redis["follow_up"]) / n, 2)},
        **{k: series(new)[k] for k in ("runs", "median_ms", "p99_ms", "max_ms", "open_median_ms",
                                       "finalize_median_ms", "cpu_median_ms", "statuses")},
        "reasons": _reasons(rt, 2 * n),
        "worlds": pool,
        "learned": learned,
        "state_bytes": _state_bytes(rt),
    }


def _per_run(kinds: Counter[str], n: int) -> dict[str, Any]:
    """SQL statements per run, in total and by kind (``INSERT rsi_runs`` …)."""
    return {"sql_statements_per_run": round(sum(kinds.values()) / n, 2),
            "sql_statements": {k: round(v / n, 2) for k, v in sorted(kinds.items())}}


def _quick(rt: Runtime) -> Deps:
    """``rt.deps`` with the sim model at latency 0: the task's own work is measured (a real reader
    call adds its latency to a follow-up's run)."""
    sim = rt.settings.sim.model_copy(update={"latency_ms": 0.0})
    return dataclasses.replace(rt.deps, settings=rt.settings.model_copy(update={"sim": sim}))


def _reasons(rt: Runtime, n: int) -> dict[str, int]:
    from rsi_common.db import runs as run_rows

    out: dict[str, int] = {}
    with rt.sessions() as s:
        for row in run_rows(s, AGENT, n):
            out[str(row.reason)] = out.get(str(row.reason), 0) + 1
        s.commit()
    return out


def _state_bytes(rt: Runtime) -> int:
    from rsi_common.db import get_agent

    with rt.sessions() as s:
        state = get_agent(s, AGENT).state
        s.commit()
    return len(json.dumps(state))


def bench_no_signal_private(runs: int = 200, *, rounds: int = 3) -> dict[str, Any]:
    """:func:`bench_no_signal` on a private redis-server (Unix socket) and SQLite database in a
    temporary directory, without worker processes (``rsi bench no-signal``); the report adds the
    machine's load average before and after (``machine``).

    Raises:
        ServerUnavailable: redis-server is not installed.
    """
    import os
    import tempfile
    from pathlib import Path

    from rsi_common.config import Settings
    from rsi_worker.bench.models import bench_models
    from rsi_worker.local.servers import RedisServer
    from rsi_worker.runtime import open_runtime

    def load() -> float:
        return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else 0.0

    with tempfile.TemporaryDirectory(prefix="rsi-bench-quiet-") as tmp:
        home = Path(tmp)
        server = RedisServer(home / "redis", unix_socket=True).start()
        try:
            base = Settings(home=home, database_url=f"sqlite:///{home / 'rsi.db'}")
            settings = base.model_copy(update={
                "sim": base.sim.model_copy(update={"latency_ms": 0.0}),
                "model_factory": "rsi_worker.bench.models:bench_models", "model_backoff_s": 0.0,
                "redis_url": server.client_url})
            rt = open_runtime(settings, migrate=True, models=bench_models(settings))
            try:
                before = load()
                report = bench_no_signal(rt, runs, rounds=rounds)
            finally:
                rt.close()
        finally:
            server.stop()
    return {**report, "machine": {"cpus": os.cpu_count(), "loadavg_1m_before": before,
                                  "loadavg_1m_after": load()}}
