"""The ``rsi`` command (typer).

Commands are grouped by who runs them: ``demo`` for a first look, ``bench`` for the measured
targets of each issue. Every command that prints a table also takes ``--json`` for scripts.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="rsi-worker: harnesses that improve from use."
)
bench = typer.Typer(no_args_is_help=True, help="Benchmarks (speed and memory targets are measured here).")
app.add_typer(bench, name="bench")
db = typer.Typer(no_args_is_help=True, help="Database schema (Alembic migrations).")
app.add_typer(db, name="db")


@app.command()
def demo() -> None:
    """Run the one-command demo (embedded mode, sim model, no keys)."""
    typer.echo("rsi demo: not yet implemented — see README roadmap")


@app.command()
def consolidate(
    agent: str = typer.Option(..., "--agent", help="The agent to consolidate."),
    inline: bool = typer.Option(
        False, "--inline", help="Run in this process (debugging) instead of the cluster."
    ),
    io: str | None = typer.Option(None, "--io", help="The triggering turn's io id (default: the newest)."),
    as_json: bool = typer.Option(False, "--json", help="Print the run record as JSON."),
) -> None:
    """Run one consolidation of AGENT and print its run record."""
    import json

    from rsi_common.config import Settings
    from rsi_common.db import load_latest_worlds
    from rsi_worker.consolidate import consolidate_inline
    from rsi_worker.wiring import open_runtime

    if not inline:
        typer.echo(
            "rsi consolidate without --inline needs the Celery cluster (not yet available); use --inline",
            err=True,
        )
        raise typer.Exit(2)
    rt = open_runtime(Settings(), migrate=True)
    try:
        if io is None:
            with rt.sessions() as s:
                rows = load_latest_worlds(s, agent, 1)
                if not rows:
                    typer.echo(f"agent {agent!r} has no recorded turns", err=True)
                    raise typer.Exit(1)
                io = str(rows[0].io_id)
        lease = rt.coord.try_begin(agent, io)
        if lease is None:
            typer.echo(f"a consolidation of {agent!r} is running; this turn was marked pending", err=True)
            raise typer.Exit(3)
        results = consolidate_inline(rt.deps, lease)
    finally:
        rt.close()
    records = [r.summary() for r in results]
    if as_json:
        typer.echo(json.dumps(records, indent=2, ensure_ascii=False))
        return
    for rec in records:
        typer.echo(f"{rec.get('run_id')}: {rec['status']} — {rec['reason']}")
        typer.echo(json.dumps(rec.get("round") or {}, indent=2, ensure_ascii=False))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(
    ctx: typer.Context,
    queues: str = typer.Option("consolidate,replay,judge", "--queues", "-Q", help="Comma-separated queues."),
    concurrency: int = typer.Option(8, "--concurrency", "-c", min=1, help="Pool size."),
    pool: str = typer.Option(
        "threads", "--pool", "-P", help="threads (model calls are I/O bound) or prefork."
    ),
    hostname: str | None = typer.Option(None, "--hostname", "-n", help="Node name (default rsi@<host>)."),
    loglevel: str = typer.Option("INFO", "--loglevel", "-l"),
) -> None:
    """Run a Celery worker of rsi-worker's tasks (extra arguments go to `celery worker`)."""
    from rsi_common.config import Settings
    from rsi_worker.app import create_app

    settings = Settings()
    if not settings.redis_url:
        typer.echo(
            "rsi worker needs RSI_REDIS_URL (the broker); `rsi demo` runs an embedded cluster", err=True
        )
        raise typer.Exit(2)
    app_ = create_app(settings)
    argv = ["worker", "-Q", queues, "-c", str(concurrency), "-P", pool, "-l", loglevel, "-E"]
    if hostname:
        argv += ["-n", hostname]
    app_.worker_main(argv + list(ctx.args))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def beat(ctx: typer.Context, loglevel: str = typer.Option("INFO", "--loglevel", "-l")) -> None:
    """Run Celery beat: the periodic sweeper (stale runs, pending turns, un-enqueued worlds)."""
    from rsi_common.config import Settings
    from rsi_worker.app import create_app

    settings = Settings()
    app_ = create_app(settings)
    schedule = str(settings.home / "celerybeat-schedule")
    settings.home.mkdir(parents=True, exist_ok=True)
    app_.start(["beat", "-l", loglevel, "-s", schedule, *ctx.args])


@db.command("upgrade")
def db_upgrade(
    url: str | None = typer.Option(None, "--url", help="SQLAlchemy URL (default: RSI_DATABASE_URL)."),
) -> None:
    """Create or migrate rsi-worker's tables (rsi_*) to the newest schema revision."""
    from rsi_common.config import Settings
    from rsi_common.db import current_revision, make_engine, upgrade

    engine = make_engine(url or Settings().database_url)
    try:
        upgrade(engine)
        typer.echo(f"rsi database schema at revision {current_revision(engine)}")
    finally:
        engine.dispose()


@bench.command("replay")
def bench_replay_cmd(
    n: int = typer.Option(200, "--n", min=1, help="Worlds in the generated pool (one replay each)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Per-replay kernel overhead under H0 (sim model, latency 0) and 2 MB world load time."""
    import json

    from rsi_worker.bench.replay import bench_replay

    report = bench_replay(n)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"rsi bench replay (n={n}, target median overhead < 5 ms)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in report.items():
        table.add_row(key, str(value))
    Console().print(table)


@bench.command("ingest")
def bench_ingest_cmd(
    turns: int = typer.Option(10_000, "--turns", min=1, help="Timed record_turn calls."),
    agents: int = typer.Option(100, "--agents", min=1, help="Agents the turns are spread over."),
    backend: str = typer.Option("both", "--backend", help="sqlite, postgres or both."),
    threads: int = typer.Option(1, "--threads", min=1, help="Concurrent callers sharing one client."),
    as_json: bool = typer.Option(False, "--json", help="Print the reports as JSON."),
) -> None:
    """record_turn throughput and p50/p99 latency: real SQL, Redis and Celery-message publish
    (private redis-server and PostgreSQL are started and removed)."""
    import json

    from rsi_worker.bench.ingest import Backend, bench_ingest_backends

    choices: dict[str, list[Backend]] = {"sqlite": ["sqlite"], "postgres": ["postgres"],
                                         "both": ["sqlite", "postgres"]}
    if backend not in choices:
        raise typer.BadParameter("must be sqlite, postgres or both", param_hint="--backend")
    reports = bench_ingest_backends(choices[backend], turns, agents, threads=threads)
    if as_json:
        typer.echo(json.dumps(reports, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"rsi bench ingest (turns={turns}, agents={agents}, threads={threads})")
    table.add_column("metric")
    for report in reports:
        table.add_column(str(report["backend"]), justify="right")
    for key in ("turns_per_s", "p50_ms", "p99_ms", "max_ms", "mean_ms", "seconds", "outcomes",
                "broker_messages", "world_bytes_mean"):
        table.add_row(key, *(str(r.get(key)) for r in reports))
    for outcome in sorted({o for r in reports for o in r["by_outcome"]}):
        for stat in ("p50_ms", "p99_ms"):
            cells = (str(r["by_outcome"].get(outcome, {}).get(stat)) for r in reports)
            table.add_row(f"{outcome} {stat}", *cells)
    Console().print(table)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
