"""``rsi bench scale``: cluster throughput with 1, 2, 4 worker processes (issue 15).

For each worker count ``n`` a fresh private cluster is started
(:class:`~rsi_worker.local.embedded.EmbeddedCluster`: a private redis-server, SQLite, ``n`` real
``rsi worker`` processes × ``concurrency`` threads — the same threads per process at every ``n``),
the sim model at ``latency_ms`` per call (the benchmark model factory, as ``rsi bench consolidate``).
``agents`` agents are seeded with the same worlds (``accepted`` accepted answers and ``corrected``
corrected ones, :func:`~rsi_worker.bench.consolidate.seed_agent`), then every agent's run is
triggered at once (``try_begin`` + a ``consolidate`` message, as a host does) and the benchmark
waits until all have closed.

Figures per ``n``, from the stored run rows:

* **throughput**: runs closed / makespan, the makespan from the first trigger to the last
  ``finished_at``; also model calls per second (every role's calls of the runs' usage);
* **speed-up** ``throughput(n) / throughput(first n)`` and **efficiency** ``speed-up / (n / first n)``
  (target ≥ 0.9: linear scaling while the work is latency bound);
* **CPU** (user + system seconds, ``/proc``) over the triggers-to-last-close stretch: each worker
  process tree, the ``redis-server``, this driver process, and the whole machine (every process,
  other users' included) — per run, and as cores kept busy (``busy_cores``) against the machine's
  cores: what bounds the curve when the work is no longer latency bound;
* **Redis commands per run** by name (the server's ``INFO commandstats`` over the same stretch: the
  broker's, the result backend's and the coordination's commands together);
* **peak RSS** of each worker process (``VmHWM`` of every process of the worker's tree — the
  supervisor and its worker child — read just before the cluster stops), in MiB.

The machine's load is reported before and after each count: with a few cores shared, the worker
processes' CPU work (SQL, JSON, Celery) is what bends the curve, not the model latency.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from rsi_common.config import Settings
from rsi_common.db import get_run
from rsi_common.db.models import RunRow
from rsi_common.dispatch import KombuDispatcher
from rsi_common.handoff import trigger_consolidation
from rsi_worker.bench.consolidate import CLOSED, FACTORY, _latest_io, _machine, seed_agent
from rsi_worker.bench.proc_cpu import machine_cpu_s, process_cpu_s, tree_cpu_s, used
from rsi_worker.runtime import Runtime, open_runtime

__all__ = ["ScaleBench", "bench_scale", "command_calls", "efficiency", "peak_rss_mib", "per_run_commands",
           "report_table"]


@dataclass(frozen=True)
class ScaleBench:
    """Knobs of ``rsi bench scale`` (defaults = the issue's setup)."""

    latency_ms: float = 200.0
    concurrency: int = 8
    """Threads per worker process (fixed across counts)."""
    workers: tuple[int, ...] = (1, 2, 4)
    agents: int = 16
    """Agents consolidating at once (each one full round)."""
    accepted: int = 4
    corrected: int = 4
    timeout_s: float = 900.0
    home: Path | None = None
    """Parent of the clusters' temporary homes (default: the system's temporary directory)."""


def efficiency(throughputs: Mapping[int, float]) -> dict[int, dict[str, float | None]]:
    """Speed-up and efficiency of each worker count against the smallest one.

    ``speedup(n) = T(n) / T(n0)``, ``efficiency(n) = speedup(n) · n0 / n`` (1.0 = linear).
    """
    if not throughputs:
        return {}
    n0 = min(throughputs)
    base = throughputs[n0]
    out: dict[int, dict[str, float | None]] = {}
    for n in sorted(throughputs):
        speedup = throughputs[n] / base if base else None
        out[n] = {"speedup": None if speedup is None else round(speedup, 3),
                  "efficiency": None if speedup is None else round(speedup * n0 / n, 3)}
    return out


def _children(pid: int) -> list[int]:
    out = []
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(status.parent.name))
    return out


def peak_rss_mib(pid: int) -> dict[int, float]:
    """``VmHWM`` (peak resident set) of ``pid`` and of its descendants, in MiB (Linux ``/proc``;
    ``{}`` where it cannot be read)."""
    out: dict[int, float] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            text = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("VmHWM:"):
                out[p] = round(int(line.split()[1]) / 1024, 1)
        todo += _children(p)
    return out


@contextlib.contextmanager
def _cluster(cfg: ScaleBench, home: Path, workers: int) -> Iterator[tuple[Runtime, Any]]:
    from rsi_worker.bench.models import bench_models
    from rsi_worker.local.embedded import EmbeddedCluster

    base = Settings(home=home, database_url=f"sqlite:///{home / 'rsi.db'}")
    settings = base.model_copy(update={
        "sim": base.sim.model_copy(update={"latency_ms": cfg.latency_ms}),
        "model_factory": FACTORY,
        "model_backoff_s": 0.0,
    })
    with EmbeddedCluster(settings, workers=workers, concurrency=cfg.concurrency,
                         mode="embedded-redis") as cluster:
        cluster.wait_ready(120.0)
        rt = open_runtime(cluster.settings, models=bench_models(cluster.settings))
        try:
            yield rt, cluster
        finally:
            rt.close()


POLL_S = 0.25
"""How often the driver looks for closed runs."""


def _closed(rt: Runtime, agents: Sequence[str]) -> dict[str, str]:
    """Of ``agents``, those whose newest 5 runs include a closed one and none running: agent → the
    newest closed run's id. One Core ``SELECT`` of three small columns (no JSON column decoded)."""
    with rt.sessions() as s:
        s.connection(execution_options={"sqlite_begin": "DEFERRED"})
        rows = s.execute(
            sa.select(RunRow.agent_id, RunRow.id, RunRow.status).where(RunRow.agent_id.in_(list(agents)))
            .order_by(RunRow.agent_id, RunRow.started_at.desc(), sa.func.coalesce(RunRow.fence, 0).desc(),
                      RunRow.id.desc())).all()
        s.commit()
    newest: dict[str, list[tuple[str, str]]] = {}
    for agent, run_id, status in rows:
        mine = newest.setdefault(agent, [])
        if len(mine) < 5:
            mine.append((run_id, status))
    out = {}
    for agent, mine in newest.items():
        closed = [run_id for run_id, status in mine if status in CLOSED]
        if closed and not any(status == "running" for _, status in mine):
            out[agent] = closed[0]
    return out


def _wait_all(rt: Runtime, agents: Sequence[str], timeout_s: float) -> list[str]:
    """Wait until every agent has a closed run and none running; their newest run ids. The driver's
    poll is one small query every :data:`POLL_S` (it ran in the measured stretch: an ORM load of every
    pending agent's run rows, JSON included, every 0.1 s cost 0.3–0.6 s of CPU per run)."""
    deadline = time.monotonic() + timeout_s
    pending = set(agents)
    done: dict[str, str] = {}
    while pending and time.monotonic() < deadline:
        found = _closed(rt, sorted(pending))
        done.update(found)
        pending -= set(found)
        if pending:
            time.sleep(POLL_S)
    if pending:
        raise TimeoutError(f"{len(pending)} runs did not finish within {timeout_s} s")
    return [done[a] for a in agents]


def _calls(usage: Mapping[str, Any] | None) -> int:
    return sum(int((u or {}).get("calls") or 0) for u in (usage or {}).values() if isinstance(u, Mapping))


def command_calls(client: Any) -> dict[str, int]:
    """The redis-server's calls so far by command (``INFO commandstats``; ``{}`` when unreadable)."""
    try:
        stats = client.info("commandstats")
    except Exception:  # a figure of the report, never a failure of the benchmark
        return {}
    return {str(k).removeprefix("cmdstat_"): int(v.get("calls", 0)) for k, v in stats.items()
            if isinstance(v, Mapping)}


def per_run_commands(before: Mapping[str, int], after: Mapping[str, int], runs_n: int) -> dict[str, float]:
    """Commands the server ran between two :func:`command_calls`, per run, largest first (≥ 0.5)."""
    per = {k: (after.get(k, 0) - before.get(k, 0)) / max(1, runs_n) for k in after}
    top = sorted(((k, round(v, 1)) for k, v in per.items() if v >= 0.5), key=lambda kv: -kv[1])
    return {"total": round(sum(per.values()), 1), **dict(top)}


def _cpu_snapshot(cluster: Any) -> dict[str, float]:
    """CPU seconds so far of each worker tree, the redis-server, this process and the machine."""
    snap = {f"worker{i}": tree_cpu_s(p.pid) for i, p in enumerate(cluster.procs)}
    server = getattr(cluster.redis, "proc", None)
    snap["redis"] = process_cpu_s(server.pid) if server is not None else 0.0
    snap["driver"] = time.process_time()
    snap["machine"] = machine_cpu_s()
    return snap


def _cpu_report(before: Mapping[str, float], after: Mapping[str, float], workers: int, runs_n: int,
                makespan: float) -> dict[str, Any]:
    """The CPU figures of one count (module docstring): seconds in all, per run, and busy cores."""
    names = [f"worker{i}" for i in range(workers)]
    d = used(before, after, [*names, "redis", "driver", "machine"])
    cluster = sum(d[n] for n in names) + d["redis"] + d["driver"]
    per_run = max(1, runs_n)
    return {
        "cpu_s": {"workers": [d[n] for n in names], "redis": d["redis"], "driver": d["driver"],
                  "machine": d["machine"]},
        "cpu_s_per_run": {"workers": round(sum(d[n] for n in names) / per_run, 3),
                          "redis": round(d["redis"] / per_run, 3), "driver": round(d["driver"] / per_run, 3)},
        "busy_cores": {"cluster": round(cluster / makespan, 2), "machine": round(d["machine"] / makespan, 2),
                       "of": os.cpu_count()},
    }


def _one_count(cfg: ScaleBench, workers: int) -> dict[str, Any]:
    before = _machine()
    with contextlib.ExitStack() as stack:
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"rsi-scale{workers}-",
                                                                     dir=cfg.home)))
        rt, cluster = stack.enter_context(_cluster(cfg, home, workers))
        agents = [f"a{i:03d}" for i in range(cfg.agents)]
        for agent in agents:
            seed_agent(rt.sessions, rt.settings, agent, accepted=cfg.accepted, corrected=cfg.corrected)
        ios = {a: _latest_io(rt, a) for a in agents}
        dispatcher = KombuDispatcher(str(rt.settings.redis_url))
        try:
            cpu0, cmds0 = _cpu_snapshot(cluster), command_calls(rt.redis)
            started = datetime.now(UTC)
            for agent in agents:
                outcome = trigger_consolidation(rt.coord, dispatcher, agent, ios[agent]).outcome
                if outcome != "enqueued":
                    raise RuntimeError(f"trigger of {agent} was {outcome}")
            ids = _wait_all(rt, agents, cfg.timeout_s)
            cpu1, cmds1 = _cpu_snapshot(cluster), command_calls(rt.redis)
        finally:
            dispatcher.close()
        rss = [peak_rss_mib(p.pid) for p in cluster.procs]
        statuses: dict[str, int] = {}
        finished, walls, calls = [], [], 0
        with rt.sessions() as s:
            for run_id in ids:
                run = get_run(s, run_id)
                statuses[run.status] = statuses.get(run.status, 0) + 1
                if run.finished_at is not None:
                    finished.append(run.finished_at)
                if run.finished_at is not None and run.started_at is not None:
                    walls.append((run.finished_at - run.started_at).total_seconds())
                calls += _calls((run.result or {}).get("usage"))
            s.commit()
    last = max(finished)
    last = last if last.tzinfo else last.replace(tzinfo=UTC)
    makespan = max(1e-9, (last - started).total_seconds())
    return {
        "workers": workers,
        "threads": workers * cfg.concurrency,
        "runs": len(ids),
        "statuses": statuses,
        "makespan_s": round(makespan, 3),
        "runs_per_s": round(len(ids) / makespan, 4),
        "model_calls": calls,
        "model_calls_per_s": round(calls / makespan, 2),
        "run_wall_median_s": round(statistics.median(walls), 3) if walls else None,
        **_cpu_report(cpu0, cpu1, workers, len(ids), makespan),
        "redis_commands_per_run": per_run_commands(cmds0, cmds1, len(ids)),
        "peak_rss_mib": [max(tree.values(), default=0.0) for tree in rss],
        "peak_rss_tree_mib": [list(tree.values()) for tree in rss],
        "machine_before": before,
        "machine_after": _machine(),
    }


def bench_scale(cfg: ScaleBench | None = None) -> dict[str, Any]:
    """Run every worker count of ``cfg`` one after the other (module docstring); the report."""
    cfg = cfg or ScaleBench()
    counts = [_one_count(cfg, n) for n in cfg.workers]
    eff = efficiency({c["workers"]: c["runs_per_s"] for c in counts})
    for c in counts:
        c.update(eff[c["workers"]])
    top = counts[-1]
    return {
        "config": {"latency_ms": cfg.latency_ms, "concurrency": cfg.concurrency, "workers": list(cfg.workers),
                   "agents": cfg.agents, "accepted": cfg.accepted, "corrected": cfg.corrected},
        "counts": counts,
        "efficiency_at_max": top["efficiency"],
        "targets": {"efficiency_ge_0_9": (top["efficiency"] or 0.0) >= 0.9},
    }


def report_table(report: Mapping[str, Any]) -> Any:
    """The report as a rich table, one column per worker count."""
    from rich.table import Table

    cfg = report["config"]
    table = Table(title=f"rsi bench scale — {cfg['agents']} agents at once, {cfg['concurrency']} threads per "
                        f"worker, sim {cfg['latency_ms']:g} ms/call")
    table.add_column("measurement")
    for c in report["counts"]:
        table.add_column(f"{c['workers']} worker(s)", justify="right")
    for key in ("threads", "runs", "statuses", "makespan_s", "runs_per_s", "model_calls_per_s",
                "run_wall_median_s", "speedup", "efficiency", "cpu_s_per_run", "busy_cores", "peak_rss_mib",
                "machine_before", "machine_after"):
        table.add_row(key, *(str(c.get(key)) for c in report["counts"]))
    ok = report["targets"]["efficiency_ge_0_9"]
    table.add_row("target: efficiency ≥ 0.9 at the largest count", *([""] * (len(report["counts"]) - 1)),
                  "[green]met[/]" if ok else "[red]missed[/]")
    return table
