"""``rsi bench``: the benchmarks (speed and memory targets are measured here, never in tests)."""

from __future__ import annotations

import json
from typing import Any

import typer

bench = typer.Typer(no_args_is_help=True, help="Benchmarks (speed and memory targets are measured here).")


def _print_flat(report: dict[str, Any], title: str, as_json: bool) -> None:
    """A flat report as JSON, or as a two-column table titled ``title``."""
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in report.items():
        table.add_row(key, str(value))
    Console().print(table)


@bench.command("replay")
def bench_replay_cmd(
    n: int = typer.Option(200, "--n", min=1, help="Worlds in the generated pool (one replay each)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Per-replay kernel overhead under H0 (sim model, latency 0) and 2 MB world load time."""
    from rsi_worker.bench.replay import bench_replay

    _print_flat(bench_replay(n), f"rsi bench replay (n={n}, target median overhead < 5 ms)", as_json)


@bench.command("stream")
def bench_stream_cmd(
    n: int = typer.Option(200, "--n", min=1, help="Streamed turns per measurement."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Latency streaming adds between the model's first chunk and the host's first event (sim, latency 0)."""
    from rsi_worker.bench.stream import bench_stream

    _print_flat(bench_stream(n), f"rsi bench stream (n={n}, target median added latency < 5 ms)", as_json)


@bench.command("ingest")
def bench_ingest_cmd(
    turns: int = typer.Option(10_000, "--turns", min=1, help="Timed record_turn calls per thread count."),
    agents: int = typer.Option(100, "--agents", min=1, help="Agents the turns are spread over."),
    backend: str = typer.Option("both", "--backend", help="sqlite, postgres or both."),
    threads: str = typer.Option(
        "1,8", "--threads",
        help="Concurrent callers sharing one client; several counts (1,8) run one after the other on "
             "the same servers and the report gives each one's throughput over the first's."),
    as_json: bool = typer.Option(False, "--json", help="Print the reports as JSON."),
) -> None:
    """record_turn throughput, p50/p99 latency, SQL statements per call and thread scaling: real SQL,
    Redis and Celery-message publish (private redis-server and PostgreSQL are started and removed)."""

    from rsi_worker.bench.ingest import Backend, bench_ingest_backends, parse_threads

    choices: dict[str, list[Backend]] = {
        "sqlite": ["sqlite"],
        "postgres": ["postgres"],
        "both": ["sqlite", "postgres"],
    }
    if backend not in choices:
        raise typer.BadParameter("must be sqlite, postgres or both", param_hint="--backend")
    try:
        counts = parse_threads(threads)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--threads") from None
    reports = bench_ingest_backends(choices[backend], turns, agents, threads=counts)
    if as_json:
        typer.echo(json.dumps(reports, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"rsi bench ingest (turns={turns}, agents={agents}, threads={threads})")
    table.add_column("metric")
    columns = [(report, run) for report in reports for run in report["runs"]]
    for report, run in columns:
        table.add_column(f"{report['backend']} ×{run['threads']}", justify="right")
    for key in (
        "turns_per_s",
        "p50_ms",
        "p99_ms",
        "max_ms",
        "mean_ms",
        "seconds",
        "sql_statements_per_call",
        "sql_round_trips_per_call",
        "client_cpu_ms_per_call",
        "client_cpu_share",
        "outcomes",
        "broker_messages",
    ):
        table.add_row(key, *(str(run.get(key)) for _, run in columns))
    table.add_row("throughput / first count", *(str(report["scaling"].get(str(run["threads"])))
                                                for report, run in columns))
    for outcome in sorted({o for _, run in columns for o in run["by_outcome"]}):
        for stat in ("p50_ms", "p99_ms"):
            cells = (str(run["by_outcome"].get(outcome, {}).get(stat)) for _, run in columns)
            table.add_row(f"{outcome} {stat}", *cells)
    for kind in sorted({k for _, run in columns for k in run["sql_statements"]}):
        table.add_row(f"sql {kind}", *(str(run["sql_statements"].get(kind, 0)) for _, run in columns))
    table.add_row("world_bytes_mean", *(str(report["world_bytes_mean"]) for report, _ in columns))
    Console().print(table)


@bench.command("consolidate")
def bench_consolidate_cmd(
    latency_ms: float = typer.Option(200.0, "--latency-ms", min=0.0, help="Sim model latency per call."),
    workers: int = typer.Option(2, "--workers", min=1, help="Worker processes of the private cluster."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Threads per worker."),
    inline_threads: int = typer.Option(0, "--inline-threads", min=0,
                                       help="Pool of the single-process run (0: workers × concurrency, "
                                            "the cluster's total threads)."),
    no_signal_runs: int = typer.Option(200, "--no-signal-runs", min=1, help="Timed no-signal runs."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    timeline: bool = typer.Option(False, "--timeline",
                                  help="Only the timeline of one in-process run with the same threads: "
                                       "every model call, member and step on a clock, and where the "
                                       "wall went against the critical path."),
) -> None:
    """One consolidation on a private cluster (2 workers × 8 threads, W=8, k=2, m=2) against its
    critical path and capacity bound; the single-process run with as many threads; early stop of a
    hopeless candidate on two world mixes with its ceiling; no-signal task time, new conversation and
    follow-up turn (docs/performance/consolidation.md)."""

    if timeline:
        from rsi_worker.bench.timeline import bench_timeline

        out = bench_timeline(threads=inline_threads or workers * concurrency, latency_ms=latency_ms)
        if not as_json:
            out = {k: v for k, v in out.items() if k != "events"}
        typer.echo(json.dumps(out, indent=2, default=str))
        return
    from rsi_worker.bench.consolidate import ConsolidateBench, bench_consolidate

    cfg = ConsolidateBench(latency_ms=latency_ms, workers=workers, concurrency=concurrency,
                           inline_threads=inline_threads or None, no_signal_runs=no_signal_runs)
    report = bench_consolidate(cfg)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    from rich.console import Console

    from rsi_worker.bench.consolidate import report_table

    Console().print(report_table(report))


@bench.command("no-signal")
def bench_no_signal_cmd(
    runs: int = typer.Option(200, "--runs", min=1, help="Timed runs of each kind."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """No-signal consolidation task time alone (new conversation and follow-up turn): wall, CPU of the
    task's thread and SQL statements per run, on a private redis-server and SQLite database
    (docs/performance/consolidation.md#the-no-signal-path)."""
    from rsi_worker.bench.nosignal import bench_no_signal_private

    _print_flat(bench_no_signal_private(runs), f"rsi bench no-signal ({runs} runs of each kind, "
                "target new-conversation median < 3 ms)", as_json)


@bench.command("consolidate-counts")
def bench_consolidate_counts_cmd(
    threads: int = typer.Option(1, "--threads", min=1, help="Fan-out threads (1: one after the other)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    warm: bool = typer.Option(False, "--warm", help="Count a second consolidation of the process "
                              "(statement cache warm, as in a running worker)."),
) -> None:
    """One consolidation in-process at sim latency 0, counted: SQL statements by kind, commits and
    writer hold times, Redis commands by name, CPU per step and member kind
    (docs/performance/consolidation.md)."""

    from rsi_worker.bench.consol_counts import count_consolidation

    report = count_consolidation(threads=threads, warm=warm)
    typer.echo(json.dumps(report, indent=None if not as_json else 2, default=str))


@bench.command("scale")
def bench_scale_cmd(
    workers: str = typer.Option("1,2,4", "--workers", help="Worker-process counts, one cluster each."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Threads per worker (fixed)."),
    agents: int = typer.Option(16, "--agents", min=1, help="Agents consolidating at once."),
    latency_ms: float = typer.Option(200.0, "--latency-ms", min=0.0, help="Sim model latency per call."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Cluster throughput at 1, 2, 4 worker processes with fixed threads per process, many agents
    consolidating at once: runs/s, speed-up, efficiency, peak RSS per worker
    (docs/performance/consolidation.md)."""

    from rsi_worker.bench.scale import ScaleBench, bench_scale, report_table

    try:
        counts = tuple(int(x) for x in workers.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter("give worker counts like 1,2,4", param_hint="--workers") from None
    if not counts or any(n < 1 for n in counts):
        raise typer.BadParameter("give worker counts like 1,2,4", param_hint="--workers")
    report = bench_scale(ScaleBench(latency_ms=latency_ms, concurrency=concurrency,
                                    workers=tuple(dict.fromkeys(counts)), agents=agents))
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    from rich.console import Console

    Console().print(report_table(report))


@bench.command("efficacy")
def bench_efficacy_cmd(
    agents: int = typer.Option(30, "--agents", min=1, help="Simulated agents per noise level."),
    noise: list[str] = typer.Option(["0", "0.1", "0.25"], "--noise",  # noqa: B008
                                    help="Sim noise levels (repeat the option or separate by commas)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the pool and of the sim model."),
    heldout: int = typer.Option(5, "--heldout", min=1, help="Held-out requests per agent."),
    noop_runs: int = typer.Option(200, "--noop-runs", min=0,
                                  help="No-op consolidations of the false-positive run (0 skips it)."),
    noop_noise: float = typer.Option(0.25, "--noop-noise", min=0.0, max=1.0,
                                     help="Sim noise of the no-op runs."),
    jobs: int = typer.Option(0, "--jobs", min=0, help="Worker processes (0: one per CPU); figures do not "
                                                      "depend on it."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Learning efficacy on a seeded pool of simulated agents: held-out pass rate under H0 and the final
    harness, false and harmful adoptions, tokens per adoption, per noise level; adoption rate of no-op
    candidates (docs/benchmarks/efficacy.md)."""
    import os

    from rsi_worker.bench.efficacy import EfficacyBench, bench_efficacy

    try:
        levels = tuple(float(x) for item in noise for x in item.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter("noise levels must be numbers", param_hint="--noise") from None
    if not levels or any(not 0.0 <= x <= 1.0 for x in levels):
        raise typer.BadParameter("give noise levels between 0 and 1", param_hint="--noise")
    cfg = EfficacyBench(agents=agents, noise=tuple(dict.fromkeys(levels)), seed=seed, heldout=heldout,
                        noop_runs=noop_runs, noop_noise=noop_noise, jobs=jobs or os.cpu_count() or 1)
    report = bench_efficacy(cfg)
    if as_json:
        typer.echo(json.dumps(report, indent=2, ensure_ascii=False))
        return
    from rich.console import Console

    from rsi_worker.bench.efficacy import report_table

    Console().print(report_table(report))


@bench.command("evolve")
def bench_evolve_cmd(
    tasks: int = typer.Option(8, "--tasks", min=1, help="Evolve tasks in the generated sim suite."),
    heldout: int = typer.Option(4, "--heldout", min=0, help="Held-out tasks (unseen requests)."),
    rounds: int = typer.Option(3, "--rounds", min=1, help="Rounds T."),
    k: int = typer.Option(2, "--k", min=1, help="Trials per task."),
    latency_ms: float = typer.Option(20.0, "--latency-ms", min=0, help="Sim latency per model call."),
    trial_parallel: int = typer.Option(4, "--trial-parallel", min=1, help="Trials in flight."),
    eval_parallel: int = typer.Option(2, "--eval-parallel", min=1, help="Candidates at once."),
    distributed: bool = typer.Option(False, "--distributed", help="Also on a 2-worker cluster."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """An offline evolve run on a generated sim suite: per-round S, held-out S, δ, calls, wall vs bound."""
    from rsi_worker.bench.evolve import bench_evolve

    report = bench_evolve(tasks=tasks, heldout=heldout, rounds=rounds, k=k, latency_ms=latency_ms,
                          trial_parallel=trial_parallel, eval_parallel=eval_parallel,
                          distributed=distributed)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    rows = report.pop("per_round")
    _print_flat(report, "rsi bench evolve (targets: heldout_gain >= 0.3, heldout_regressions 0, "
                        "wall <= 1.2 x bound)", False)
    for r in rows:
        typer.echo(json.dumps(r))


@bench.command("dream")
def bench_dream_cmd(
    tasks: int = typer.Option(20, "--tasks", min=1, help="Fresh simulated tasks for attempts and tokens."),
    worlds: int = typer.Option(8, "--worlds", min=1, help="Generated worlds of the timed sweep."),
    workers: int = typer.Option(2, "--workers", min=1, help="Worker processes of the distributed sweep."),
    episodes: int = typer.Option(40, "--episodes", min=1, help="Episodes of the sandbox overhead figure."),
    sandbox_only: bool = typer.Option(
        False, "--sandbox-only", help="Only the sandbox overhead (seconds, from a fresh small process)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Dream: attempts/tokens to the incumbent's best (π★ vs π⁰), sweep wall vs bound, sandbox overhead."""
    from rsi_worker.bench.dream import bench_dream

    report = bench_dream(
        tasks=tasks, worlds=worlds, workers=workers, episodes=episodes, sandbox_only=sandbox_only
    )
    _print_flat(report, "rsi bench dream (target sandbox overhead < 20 ms median)", as_json)


@bench.command("runtime")
def bench_runtime_cmd(
    n: int = typer.Option(200, "--n", min=1, help="Spawns (and child turns) measured."),
    roots: int = typer.Option(0, "--roots", min=0, help="Cluster run: roots (0 = no cluster run; R11: 100)."),
    children: int = typer.Option(10, "--children", min=1, help="Cluster run: children per root (R11: 10)."),
    workers: int = typer.Option(2, "--workers", min=1, help="Cluster run: worker processes (R11: 2)."),
    threads: int = typer.Option(64, "--threads", min=1, help="Cluster run: threads per worker (R11: 64)."),
    kills: int = typer.Option(0, "--kills", min=0, help="Cluster run: random kill -9 of a worker (R11: 20)."),
    kill_window_s: float = typer.Option(20.0, "--kill-window-s", min=1, help="Kills fall in this window."),
    turn_cost: bool = typer.Option(False, "--turn-cost", help="Count what one child turn costs (--n turns)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """The agent runtime's spawn call and spawn → child's first model request (private PostgreSQL and
    redis-server, inline driver); with ``--roots``, a run of roots × children on real workers
    (``--kills``: random ``kill -9``) instead; with ``--turn-cost``, the counts of one child turn
    (docs/runtime/turn-cost.md)."""
    if turn_cost:
        from rsi_worker.bench.runtime_turn_cost import bench_turn_cost

        _print_flat(bench_turn_cost(n), f"rsi bench runtime --turn-cost (n={n}, per child turn)", as_json)
        return
    if roots:
        from rsi_worker.bench.runtime_cluster import bench_runtime_cluster

        report = bench_runtime_cluster(roots=roots, children=children, workers=workers, threads=threads,
                                       kills=kills, kill_window_s=kill_window_s)
        title = f"rsi bench runtime --roots {roots} --children {children} --kills {kills}"
        _print_flat(report, title, as_json)
        return
    from rsi_worker.bench.runtime import bench_runtime

    _print_flat(bench_runtime(n), f"rsi bench runtime (n={n}, targets in the report)", as_json)
