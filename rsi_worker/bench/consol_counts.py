"""``rsi bench consolidate-counts``: what one consolidation does, counted (issue 15).

One full consolidation (the benchmark's agent: :func:`~rsi_worker.bench.consolidate.seed_agent`, W = 8,
k = 2, m = 2) run in this process (``consolidate_inline``) at sim latency 0 on a private SQLite file
and a private ``redis-server``, with counters on both:

* **SQL**: statements by kind (``SELECT rsi_runs`` …, SQLAlchemy ``before_cursor_execute``), commits,
  transactions by mode (``BEGIN IMMEDIATE``: a write turn; ``BEGIN DEFERRED``: a read), and the
  **writer hold time** of each ``BEGIN IMMEDIATE`` transaction — from its ``begin`` event to its
  ``commit``/``rollback`` event, in milliseconds (p50, p99, max): the time the process's write turn
  (and the database file's writer lock, docs/performance/record-path.md) is held, which a host's
  ``record_turn`` waits for — and the CPU the holding thread used meanwhile (``time.thread_time``:
  the work done under the lock, which a loaded machine's scheduling does not inflate);
* **Redis**: commands by name (a script by its name in :class:`~rsi_common.coord.Coordinator`) and
  round trips (a pipeline is one);
* **CPU** (``time.thread_time``) and calls per unit of work: the ``open`` step, each fan-out member
  kind (``trials``, ``drafts``), each later step, and the final write;
* **decodes**: run contexts (``RoundContext.from_json``) and worlds (``turn_world``) built.

These counts do not move with the machine's load (the CPU figures do, a little). ``threads = 1``
(default) runs the fan-outs one after the other: the counts are deterministic; more threads show the
hold times under contention of the process's own threads.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from rsi_worker.bench.ingest import percentile, statement_kind

__all__ = ["Counts", "count_consolidation"]


class Counts:
    """The counters of one measured stretch (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sql: Counter[str] = Counter()
        self.commits = 0
        self.rollbacks = 0
        self.holds_ms: list[float] = []
        self.hold_cpu_ms: list[float] = []
        self.longest: list[tuple[float, str]] = []
        self.by_kind: dict[tuple[str, str], list[tuple[float, float]]] = {}
        self.redis: Counter[str] = Counter()
        self.round_trips = 0
        self.cpu_ms: dict[str, float] = {}
        self.calls: Counter[str] = Counter()
        self.decodes: Counter[str] = Counter()

    def report(self) -> dict[str, Any]:
        holds = sorted(self.holds_ms)
        return {
            "sql_statements": sum(self.sql.values()),
            "sql_by_kind": dict(self.sql.most_common()),
            "commits": self.commits,
            "rollbacks": self.rollbacks,
            "write_transactions": len(holds),
            "writer_hold_ms": {
                "p50": round(statistics.median(holds), 3) if holds else None,
                "p99": round(percentile(holds, 0.99), 3) if holds else None,
                "max": round(max(holds), 3) if holds else None,
                "total": round(sum(holds), 1),
            },
            "writer_hold_cpu_ms": {
                "p50": round(statistics.median(self.hold_cpu_ms), 3) if self.hold_cpu_ms else None,
                "max": round(max(self.hold_cpu_ms), 3) if self.hold_cpu_ms else None,
                "total": round(sum(self.hold_cpu_ms), 1),
            },
            "longest_write_transactions": [
                {"ms": round(ms, 3), "statements": what}
                for ms, what in sorted(self.longest, reverse=True)[:5]],
            "write_transactions_by_kind": _by_kind(self.by_kind),
            "redis_commands": sum(self.redis.values()),
            "redis_round_trips": self.round_trips,
            "redis_by_command": dict(self.redis.most_common()),
            "cpu_ms": {k: round(v, 1) for k, v in sorted(self.cpu_ms.items(), key=lambda kv: -kv[1])},
            "cpu_ms_total": round(sum(self.cpu_ms.values()), 1),
            "calls": dict(self.calls),
            "decodes": dict(self.decodes),
        }


def _by_kind(groups: dict[tuple[str, str], list[tuple[float, float]]]) -> list[dict[str, Any]]:
    """Every write transaction of the stretch, grouped by (caller, statements): count, writer hold
    and CPU under the lock (p50 / max, ms), largest CPU first."""
    out = []
    for (site, what), pairs in groups.items():
        holds, cpus = [h for h, _ in pairs], [c for _, c in pairs]
        out.append({"site": site, "statements": what, "n": len(pairs),
                    "hold_ms": {"p50": round(statistics.median(holds), 3), "max": round(max(holds), 3)},
                    "cpu_ms": {"p50": round(statistics.median(cpus), 3), "max": round(max(cpus), 3)}})
    return sorted(out, key=lambda g: -g["cpu_ms"]["max"])


_OWN = ("rsi_worker/consolidate/", "rsi_worker/roles/", "rsi_worker/runtime")


def _site() -> str:
    """The innermost frame of the consolidation's own code that opened the transaction
    (``module.function``), or ``?``."""
    import sys

    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if any(part in name for part in _OWN):
            module = name.rsplit("/", 1)[-1].removesuffix(".py")
            return f"{module}.{frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


@contextlib.contextmanager
def _sql(engine: Engine, counts: Counts) -> Iterator[None]:
    local = threading.local()

    def on_execute(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        kind = statement_kind(statement)
        if getattr(local, "t0", None) is not None:
            local.kinds.append(kind)
        with counts.lock:
            counts.sql[kind] += 1

    def on_begin(conn: Any) -> None:
        mode = str(conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")).upper()
        local.site = _site() if mode != "DEFERRED" else ""
        local.t0 = time.perf_counter() if mode != "DEFERRED" else None
        local.cpu0 = time.thread_time()
        local.kinds = []

    def on_end(name: str) -> Callable[[Any], None]:
        def listener(conn: Any) -> None:
            t0 = getattr(local, "t0", None)
            local.t0 = None
            with counts.lock:
                if name == "commit":
                    counts.commits += 1
                else:
                    counts.rollbacks += 1
                if t0 is not None:
                    ms = (time.perf_counter() - t0) * 1000
                    cpu = (time.thread_time() - local.cpu0) * 1000
                    what = ", ".join(getattr(local, "kinds", []))
                    counts.holds_ms.append(ms)
                    counts.hold_cpu_ms.append(cpu)
                    counts.longest.append((ms, what))
                    counts.by_kind.setdefault((local.site, what), []).append((ms, cpu))
        return listener

    commit, rollback = on_end("commit"), on_end("rollback")
    listeners: list[tuple[str, Callable[..., Any]]] = [
        ("before_cursor_execute", on_execute), ("begin", on_begin), ("commit", commit),
        ("rollback", rollback)]
    for name, fn in listeners:
        event.listen(engine, name, fn)
    try:
        yield
    finally:
        for name, fn in listeners:
            event.remove(engine, name, fn)


@contextlib.contextmanager
def _redis(client: Any, coord: Any, counts: Counts) -> Iterator[None]:
    """Count the commands of ``client`` (and of its pipelines), scripts by their coordinator name."""
    import redis

    names = {getattr(s, "sha", None): attr.lstrip("_") for attr, s in vars(coord).items()
             if isinstance(s, redis.commands.core.Script)}
    plain = redis.Redis.execute_command
    execute = redis.client.Pipeline.execute

    def name_of(args: tuple[Any, ...]) -> str:
        cmd = str(args[0]).upper() if args else "?"
        if cmd in ("EVALSHA", "EVAL") and len(args) > 1:
            return f"script {names.get(args[1], '?')}"
        return cmd

    def counted(self: Any, *args: Any, **options: Any) -> Any:
        if not isinstance(self, redis.client.Pipeline):
            with counts.lock:
                counts.redis[name_of(args)] += 1
                counts.round_trips += 1
        return plain(self, *args, **options)  # type: ignore[no-untyped-call]

    def counted_pipe(self: Any, *args: Any, **kwargs: Any) -> Any:
        with counts.lock:
            for entry in self.command_stack:
                counts.redis[name_of(tuple(entry[0]))] += 1
            counts.round_trips += 1 if self.command_stack else 0
        return execute(self, *args, **kwargs)

    redis.Redis.execute_command = counted  # type: ignore[method-assign]
    redis.client.Pipeline.execute = counted_pipe  # type: ignore[method-assign]
    try:
        yield
    finally:
        redis.Redis.execute_command = plain  # type: ignore[method-assign]
        redis.client.Pipeline.execute = execute  # type: ignore[method-assign]


@contextlib.contextmanager
def _patched(obj: Any, attr: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    old = getattr(obj, attr)
    setattr(obj, attr, wrap(old))
    try:
        yield
    finally:
        setattr(obj, attr, old)


def _timed(counts: Counts, label: Callable[..., str]) -> Callable[[Any], Any]:
    def wrap(fn: Any) -> Any:
        def inner(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                key = label(*args, **kwargs)
                with counts.lock:
                    counts.cpu_ms[key] = counts.cpu_ms.get(key, 0.0) + (time.thread_time() - t0) * 1000
                    counts.calls[key] += 1
        return inner
    return wrap


def _counted(counts: Counts, key: str) -> Callable[[Any], Any]:
    def wrap(fn: Any) -> Any:
        def inner(*args: Any, **kwargs: Any) -> Any:
            with counts.lock:
                counts.decodes[key] += 1
            return fn(*args, **kwargs)
        return inner
    return wrap


@contextlib.contextmanager
def _cpu(counts: Counts) -> Iterator[None]:
    """CPU per unit of work: the flow's entry points, wrapped where the drivers look them up."""
    from rsi_worker.consolidate import context, flow, inline

    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(flow, "open_run", _timed(counts, lambda *a, **k: "open")))
        stack.enter_context(_patched(flow, "run_member", _timed(counts, lambda d, m, *a, **k: f"member {m}")))
        stack.enter_context(_patched(flow, "run_step", _timed(counts, lambda d, s, *a, **k: f"step {s}")))
        stack.enter_context(_patched(flow, "close", _timed(counts, lambda *a, **k: "close")))
        stack.enter_context(_patched(context.RoundContext, "from_json", lambda fn: classmethod(
            _counted(counts, "run context")(fn.__func__))))
        for module in _world_users():
            stack.enter_context(_patched(module, "turn_world", _counted(counts, "world")))
        del inline
        yield


def _world_users() -> list[Any]:
    import importlib
    import pkgutil

    import rsi_worker.consolidate as pkg

    out = []
    for info in pkgutil.iter_modules(pkg.__path__):
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        if callable(getattr(module, "turn_world", None)):
            out.append(module)
    return out


def count_consolidation(*, threads: int = 1, home: Path | None = None, warm: bool = False) -> dict[str, Any]:
    """Seed the benchmark's agent and count one consolidation (module docstring).

    ``warm``: first run one uncounted consolidation of another agent in the same process, so the
    counted one finds SQLAlchemy's statement cache and the connection pool as a running worker does
    (a cold process compiles every statement once, inside its first transactions).

    Returns:
        ``{run: {status, winner, trials}, threads, wall_s, process_cpu_s, counts: Counts.report()}``.
    """
    from rsi_common.config import Settings
    from rsi_worker.bench.consolidate import FACTORY, _latest_io, seed_agent
    from rsi_worker.bench.models import bench_models
    from rsi_worker.consolidate import SerialExecutor, ThreadExecutor, consolidate_inline
    from rsi_worker.local.servers import RedisServer
    from rsi_worker.runtime import open_runtime

    with contextlib.ExitStack() as stack:
        home = home or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rsi-counts-")))
        server = RedisServer(home / "redis", unix_socket=True).start()
        stack.callback(server.stop)
        base = Settings(home=home, database_url=f"sqlite:///{home / 'rsi.db'}", redis_url=server.url)
        settings = base.model_copy(update={"sim": base.sim.model_copy(update={"latency_ms": 0.0}),
                                           "model_factory": FACTORY, "model_backoff_s": 0.0})
        rt = open_runtime(settings, migrate=True, models=bench_models(settings))
        stack.callback(rt.close)
        executor = SerialExecutor() if threads <= 1 else ThreadExecutor(threads)
        if warm:
            seed_agent(rt.sessions, rt.settings, "warmup")
            first = rt.coord.try_begin("warmup", _latest_io(rt, "warmup"))
            if first is None:
                raise RuntimeError("the lease of the warm-up agent is held")
            consolidate_inline(rt.deps, first, executor)
        seed_agent(rt.sessions, rt.settings, "counted")
        lease = rt.coord.try_begin("counted", _latest_io(rt, "counted"))
        if lease is None:
            raise RuntimeError("the lease of the counted agent is held")
        counts = Counts()
        with _sql(rt.engine, counts), _redis(rt.redis, rt.coord, counts), _cpu(counts):
            t0, c0 = time.perf_counter(), time.process_time()
            results = consolidate_inline(rt.deps, lease, executor)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        result = results[0] if results else None
        from rsi_common.db import replay_rows

        with rt.sessions() as s:
            trials = len(replay_rows(s, result.run_id)) if result is not None and result.run_id else 0
            s.commit()
        return {
            "run": {"status": result.status if result else None,
                    "winner": ((result.round or {}).get("winner") if result else None), "trials": trials},
            "threads": threads,
            "warm": warm,
            "wall_s": round(wall, 3),
            "process_cpu_s": round(cpu, 3),
            "counts": counts.report(),
        }
