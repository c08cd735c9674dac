"""Running the cluster: ``rsi worker``, ``rsi beat``, ``rsi consolidate`` (``rsi demo``: own module)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    from rsi_worker.commands.demo import demo

    app.command()(demo)
    app.command()(consolidate)
    app.command(context_settings=EXTRA)(worker)
    app.command(context_settings=EXTRA)(beat)


EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


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


def beat(ctx: typer.Context, loglevel: str = typer.Option("INFO", "--loglevel", "-l")) -> None:
    """Run Celery beat: the periodic sweeper (stale runs, pending turns, un-enqueued worlds)."""
    from rsi_common.config import Settings
    from rsi_worker.app import create_app

    settings = Settings()
    app_ = create_app(settings)
    schedule = str(settings.home / "celerybeat-schedule")
    settings.home.mkdir(parents=True, exist_ok=True)
    app_.start(["beat", "-l", loglevel, "-s", schedule, *ctx.args])
