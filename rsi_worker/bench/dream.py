"""``rsi bench dream``: what the Dream cycle buys and what its machinery costs (issue 19;
docs/dream/README.md#measured).

1. **Promotion**: fresh agent on SQLite; cycles (seeds 0, 1, …, at most ``max_cycles``) with the sim
   development agent until one promotes. The policy compared is the promoted one, else the last
   cycle's replay winner (``promoted: false`` says so).
2. **Attempts and tokens to reach the incumbent's best** on ``tasks`` fresh simulated search tasks
   (seed 1000+): π⁰ and π★ each explore every task live at their baked default β; the target of a
   task is π⁰'s best score there; a policy's cost is the attempts (and tokens) revealed up to its
   first cell scoring ≥ the target, or all it revealed when it never reaches it (counted in
   ``pistar_missed``). ``attempts_change_pct`` = 100·(Σ π★ − Σ π⁰)/Σ π⁰, the same for tokens.
   Beside it, what each policy spent in all (``pi0_cells``, ``pistar_cells``) and what π★ bought with
   it: the tasks where its best is above π⁰'s (``pistar_better_tasks``) and the mean difference of
   the bests on the task's scale (``pistar_best_gain_mean``).
3. **Sweep wall**: the β sweep of π★ (as untrusted code, so sandboxed) over ``worlds`` generated
   worlds, inline and fanned out as ``rsi.dream_episodes`` tasks on a private cluster of ``workers``
   ``rsi worker`` processes × 1 thread (local worker processes when redis-server is missing), after
   a warm-up sweep; the capacity-aware bound is
   max(Σ episode time / workers, the longest episode) from the inline episode times.
4. **Sandbox overhead per episode**: the same episodes of a builtin policy in process, in a child
   forked from this process's zygote (the default; its start-up is timed apart, as the first
   episode) and in a child forked from this process (the former path, with its own network
   namespace); the median, p90 and p99 of the differences, beside the median of a bare fork + exit +
   wait of this process (large after the cycles and the sweep: what the zygote avoids) and the load
   average. On a loaded machine wall time mostly measures waiting for a core, so the CPU time per
   episode of every process involved (this one, the zygote, the children) is reported too, as the
   mean difference from the in-process episode (``sandbox_cpu_overhead_ms``, and for the direct
   fork).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rsi_common.db import make_engine, session_factory, upgrade
from rsi_worker.dream.cycle import CycleConfig, run_cycle
from rsi_worker.dream.devagent import dev_client
from rsi_worker.dream.evaluate import EvalParams, InlineExecutor, PoolExecutor, run_job, sweep
from rsi_worker.dream.policies import PolicyCode, builtin, incumbent_policy
from rsi_worker.dream.replay import LiveQuestion, ReplayQuestion, run_episode
from rsi_worker.dream.sandbox import SandboxLimits, SandboxSession
from rsi_worker.dream.simtasks import SimSearchTask, generate_worlds
from rsi_worker.dream.tree import TreeWorld
from rsi_worker.dream.zygote import zygote

__all__ = ["bench_dream"]


def _winner(max_cycles: int) -> tuple[PolicyCode, bool, list[str]]:
    statuses: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'dream.db'}")
        upgrade(engine)
        factory = session_factory(engine)
        out: dict[str, Any] = {}
        try:
            for seed in range(max_cycles):
                out = run_cycle(factory, "bench", dev_client("sim", "sim-1"), CycleConfig(seed=seed))
                statuses.append(out["status"])
                if out["status"] == "promoted":
                    break
        finally:
            engine.dispose()
    code = PolicyCode.from_json(out["versions"][out["m_star"]])
    if out["status"] == "promoted":
        code = code.with_beta(out["next_beta"]["beta"])
    return code, out["status"] == "promoted", statuses


def _live_cells(code: PolicyCode, task: SimSearchTask) -> list[tuple[float | None, int]]:
    q = LiveQuestion(task, world_id="bench")
    with code.session() as s:
        run_episode(q, s, code.default_beta)
    return [(c.score, c.tokens) for c in q.revealed]


def _cost_to(cells: list[tuple[float | None, int]], target: float) -> tuple[int, int, bool]:
    tokens = 0
    for i, (score, tok) in enumerate(cells, 1):
        tokens += tok
        if score is not None and score >= target:
            return i, tokens, True
    return len(cells), tokens, False


def _attempts(pi0: PolicyCode, star: PolicyCode, tasks: int) -> dict[str, Any]:
    a0 = a1 = t0 = t1 = missed = c0 = c1 = better = 0
    gain = 0.0
    for i in range(tasks):
        task = SimSearchTask(1000 + i, f"bench-{i}")
        base, new = _live_cells(pi0, task), _live_cells(star, task)
        target = max([task.baseline, *(s for s, _ in base if s is not None)])
        star_best = max([task.baseline, *(s for s, _ in new if s is not None)])
        n0, k0, _ = _cost_to(base, target)
        n1, k1, hit = _cost_to(new, target)
        a0, a1, t0, t1, missed = a0 + n0, a1 + n1, t0 + k0, t1 + k1, missed + (not hit)
        c0, c1, better, gain = (
            c0 + len(base),
            c1 + len(new),
            better + (star_best > target),
            gain + star_best - target,
        )
    return {
        "pi0_attempts": a0,
        "pistar_attempts": a1,
        "pi0_tokens": t0,
        "pistar_tokens": t1,
        "pistar_missed": missed,
        "attempts_change_pct": round(100 * (a1 - a0) / max(1, a0), 1),
        "tokens_change_pct": round(100 * (t1 - t0) / max(1, t0), 1),
        "pi0_cells": c0,
        "pistar_cells": c1,
        "pistar_better_tasks": better,
        "pistar_best_gain_mean": round(gain / tasks, 4),
    }


def _cluster_sweep(
    code: PolicyCode, ws: list[TreeWorld], params: EvalParams, workers: int
) -> tuple[float, Any]:
    """The sweep on a private cluster (redis-server, ``workers`` ``rsi worker`` processes × 1 thread),
    after a warm-up sweep of one β; ``(wall seconds, report)``."""
    from rsi_common.config import Settings
    from rsi_worker.cluster.app import create_app
    from rsi_worker.cluster.dream_tasks import CeleryExecutor
    from rsi_worker.local.embedded import EmbeddedCluster

    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedCluster(Settings(home=Path(tmp)), workers=workers, concurrency=1, mode="embedded-redis") as c,
    ):
        c.wait_ready(180.0)  # worker start-up takes ~50 s at load 10 on 2 cores
        app = create_app(c.settings)
        engine = make_engine(c.settings.database_url)
        sessions = session_factory(engine)
        try:
            warm = EvalParams(betas=(0.5,))
            sweep(code, "warm", ws[: 2 * workers], warm, CeleryExecutor(app, sessions, "bench", chunk=1))
            t = time.perf_counter()
            report = sweep(code, "s", ws, params, CeleryExecutor(app, sessions, "bench", chunk=2))
            return time.perf_counter() - t, report
        finally:
            engine.dispose()


def _sweep_wall(star: PolicyCode, worlds: int, workers: int) -> dict[str, Any]:
    from rsi_worker.local.servers import redis_server_bin

    untrusted = PolicyCode(star.name, "# untrusted\n" + star.source, star.default_beta, star.W)
    ws = generate_worlds(7, worlds)
    params = EvalParams()
    times = []
    for b in params.betas:
        for w in ws:
            t = time.perf_counter()
            run_job(untrusted, w, b, params)
            times.append(time.perf_counter() - t)
    t = time.perf_counter()
    inline = sweep(untrusted, "s", ws, params, InlineExecutor())
    inline_s = time.perf_counter() - t
    if redis_server_bin() is not None:
        executor = "celery"
        dist_s, dist = _cluster_sweep(untrusted, ws, params, workers)
    else:
        executor = "processes"
        t = time.perf_counter()
        dist = sweep(untrusted, "s", ws, params, PoolExecutor(workers))
        dist_s = time.perf_counter() - t
    bound = max(sum(times) / workers, max(times))
    return {
        "sweep_episodes": len(times),
        "sweep_executor": executor,
        "sweep_inline_s": round(inline_s, 3),
        "sweep_distributed_s": round(dist_s, 3),
        "sweep_bound_s": round(bound, 3),
        "sweep_wall_over_bound": round(dist_s / bound, 2),
        "sweep_same_report": dist == inline,
        "sweep_workers": workers,
    }


def _bare_fork_ms(n: int = 20) -> float:
    """Median of fork + exit + wait of this process: what the machine's load does to a fork."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child exits at once
            os._exit(0)
        os.waitpid(pid, 0)
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1e3, 2)


def _pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) in ms."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3, 2)


def _zygote_cpu_s(pid: int) -> float:
    """CPU seconds of the zygote and its reaped children (``/proc/<pid>/stat``: utime, stime,
    cutime, cstime, in clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _cpu_ms_per_episode(code: PolicyCode, ws: list[TreeWorld], limits: SandboxLimits | None) -> float:
    """CPU ms per episode, every process included: this one, its reaped children (direct forks) and
    the zygote with its reaped children; ``limits`` None = in process. Unlike wall time it barely
    depends on the machine's load."""
    z = zygote()
    t, kids, zcpu = time.process_time(), os.times(), _zygote_cpu_s(z.pid)
    for w in ws:
        if limits is None:
            with code.session() as s:
                run_episode(ReplayQuestion(w), s, 0.6)
        else:
            with SandboxSession(code.source, limits) as box:
                run_episode(ReplayQuestion(w), box, 0.6)
    z.sync()  # the last child is reaped, its CPU counted
    after = os.times()
    total = time.process_time() - t
    total += (after.children_user + after.children_system) - (kids.children_user + kids.children_system)
    total += _zygote_cpu_s(z.pid) - zcpu
    return total * 1e3 / len(ws)


def _sandbox_overhead(episodes: int) -> dict[str, Any]:
    code = builtin("parallel_refine")
    ws = generate_worlds(11, episodes)
    direct = SandboxLimits(zygote=False)
    diffs, diffs_direct, inproc = [], [], []
    network = launcher = ""
    t = time.perf_counter()
    with SandboxSession(code.source) as box:  # starts this process's zygote (once per worker)
        run_episode(ReplayQuestion(ws[0]), box, 0.6)
    first_ms = (time.perf_counter() - t) * 1e3
    for w in ws:
        t = time.perf_counter()
        with code.session() as s:
            a = run_episode(ReplayQuestion(w), s, 0.6)
        t1 = time.perf_counter()
        with SandboxSession(code.source) as box:
            b = run_episode(ReplayQuestion(w), box, 0.6)
            network, launcher = box.network, box.launcher
        t2 = time.perf_counter()
        with SandboxSession(code.source, direct) as box:
            c = run_episode(ReplayQuestion(w), box, 0.6)
        t3 = time.perf_counter()
        assert a.to_json() == b.to_json() == c.to_json()
        inproc.append(t1 - t)
        diffs.append((t2 - t1) - (t1 - t))
        diffs_direct.append((t3 - t2) - (t1 - t))
    cpu_in = _cpu_ms_per_episode(code, ws, None)
    cpu_zygote = _cpu_ms_per_episode(code, ws, SandboxLimits())
    cpu_direct = _cpu_ms_per_episode(code, ws, direct)
    return {
        "sandbox_episodes": episodes,
        "sandbox_launcher": launcher,
        "sandbox_network_barrier": network,
        "sandbox_overhead_median_ms": round(statistics.median(diffs) * 1e3, 2),
        "sandbox_overhead_p90_ms": _pct(diffs, 0.9),
        "sandbox_overhead_p99_ms": _pct(diffs, 0.99),
        "sandbox_first_episode_ms": round(first_ms, 2),
        "sandbox_overhead_direct_fork_median_ms": round(statistics.median(diffs_direct) * 1e3, 2),
        "sandbox_cpu_overhead_ms": round(cpu_zygote - cpu_in, 2),
        "sandbox_cpu_overhead_direct_fork_ms": round(cpu_direct - cpu_in, 2),
        "inprocess_episode_median_ms": round(statistics.median(inproc) * 1e3, 2),
        "bare_fork_median_ms": _bare_fork_ms(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def bench_dream(
    *,
    tasks: int = 20,
    worlds: int = 8,
    workers: int = 2,
    episodes: int = 40,
    max_cycles: int = 4,
    sandbox_only: bool = False,
) -> dict[str, Any]:
    """The flat report (module docstring); ``sandbox_only``: part 4 alone, from this process as it
    is (small: its bare fork is not a worker's)."""
    if sandbox_only:
        return _sandbox_overhead(episodes)
    star, promoted, statuses = _winner(max_cycles)
    report: dict[str, Any] = {
        "promoted": promoted,
        "cycle_statuses": ",".join(statuses),
        "pistar": star.name,
        "pistar_beta": star.default_beta,
        "pi0": incumbent_policy().name,
    }
    report.update(_attempts(incumbent_policy(), star, tasks))
    report.update(_sweep_wall(star, worlds, workers))
    report.update(_sandbox_overhead(episodes))
    return report
