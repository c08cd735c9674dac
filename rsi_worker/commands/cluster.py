"""Running the cluster: ``rsi worker``, ``rsi beat``, ``rsi consolidate`` (``rsi demo``: own module)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rsi_worker.runtime import Runtime


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
    wait_s: float = typer.Option(
        120.0, "--wait", min=0, help="Cluster mode: seconds to wait for the run (0 = no)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the run record as JSON."),
) -> None:
    """Run one consolidation of AGENT (on the cluster, or ``--inline`` here) and print its run record."""
    from rsi_common.config import Settings
    from rsi_worker.runtime import open_runtime

    settings = Settings()
    if not inline and not settings.redis_url:
        typer.echo("rsi consolidate needs RSI_REDIS_URL (the cluster's broker), or --inline", err=True)
        raise typer.Exit(2)
    rt = open_runtime(settings, migrate=inline)
    try:
        io = io or _newest_io(rt, agent)
        records = _inline_run(rt, agent, io) if inline else _cluster_run(rt, agent, io, wait_s)
    finally:
        rt.close()
    _print_records(records, as_json)


def _newest_io(rt: Runtime, agent: str) -> str:
    from rsi_common.db import load_latest_worlds

    with rt.sessions() as s:
        rows = load_latest_worlds(s, agent, 1)
    if not rows:
        typer.echo(f"agent {agent!r} has no recorded turns", err=True)
        raise typer.Exit(1)
    return str(rows[0].io_id)


def _inline_run(rt: Runtime, agent: str, io: str) -> list[dict[str, Any]]:
    from rsi_worker.consolidate import consolidate_inline

    lease = rt.coord.try_begin(agent, io)
    if lease is None:
        typer.echo(f"a consolidation of {agent!r} is running; this turn was marked pending", err=True)
        raise typer.Exit(3)
    return [r.summary() for r in consolidate_inline(rt.deps, lease)]


def _cluster_run(rt: Runtime, agent: str, io: str, wait_s: float) -> list[dict[str, Any]]:
    """Trigger the run on the cluster (like a host's turn) and wait for a run that covers ``io``."""
    import time

    from rsi_common.db import runs
    from rsi_common.dispatch import KombuDispatcher
    from rsi_common.handoff import trigger_consolidation

    with rt.sessions() as s:
        before = {r.id for r in runs(s, agent, 200)}
    dispatcher = KombuDispatcher(str(rt.settings.redis_url))
    try:
        handoff = trigger_consolidation(rt.coord, dispatcher, agent, io)
    finally:
        dispatcher.close()
    if handoff.outcome == "deferred":
        typer.echo(f"the cluster could not be reached ({handoff.error}); nothing was enqueued", err=True)
        raise typer.Exit(2)
    typer.echo(f"{handoff.outcome}: {agent} / {io}", err=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        with rt.sessions() as s:
            new = [r for r in runs(s, agent, 20) if r.id not in before]
        done = [r for r in new if r.status != "running"]
        if done and not any(r.status == "running" for r in new):
            return [dict(r.result or {"status": r.status, "reason": r.reason}, run_id=r.id) for r in done]
        time.sleep(0.2)
    if wait_s:
        typer.echo(
            f"no run of {agent!r} finished within {wait_s:.0f} s (it goes on in the cluster)", err=True
        )
        raise typer.Exit(4)
    return []


def _print_records(records: list[dict[str, Any]], as_json: bool) -> None:
    import json

    if as_json:
        typer.echo(json.dumps(records, indent=2, ensure_ascii=False, default=str))
        return
    for rec in records:
        typer.echo(f"{rec.get('run_id')}: {rec['status']} — {rec['reason']}")
        typer.echo(json.dumps(rec.get("round") or {}, indent=2, ensure_ascii=False))


def _check_queues(value: str) -> str:
    from rsi_common.dispatch import QUEUE_AGENTS, QUEUES

    unknown = [q for q in value.split(",") if q not in (*QUEUES, QUEUE_AGENTS)]
    if unknown or not value:
        raise typer.BadParameter(f"unknown queue(s) {unknown}; the queues are {', '.join(QUEUES)}")
    return value


def _logging(settings: Any, loglevel: str | None) -> str:
    """Configure the root logger from settings (``-l`` overrides ``RSI_LOG_LEVEL``); returns the level."""
    from rsi_worker.observability.logs import configure_logging

    level = (loglevel or settings.log_level).upper()
    configure_logging(settings, level=level)
    return str(level)


def _quiet(settings: Any) -> list[str]:
    """JSON logs: no start-up banner, so every line the process writes is one JSON object."""
    return ["--quiet"] if settings.log_format == "json" else []


def worker(
    ctx: typer.Context,
    queues: str = typer.Option(
        "consolidate,replay,judge",
        "--queues",
        "-Q",
        callback=_check_queues,
        help="Comma-separated queues (consolidate, replay, judge).",
    ),
    concurrency: int = typer.Option(8, "--concurrency", "-c", min=1, help="Pool size."),
    pool: str = typer.Option(
        "threads", "--pool", "-P", help="threads (model calls are I/O bound) or prefork."
    ),
    hostname: str | None = typer.Option(None, "--hostname", "-n", help="Node name (default celery@<host>)."),
    loglevel: str | None = typer.Option(None, "--loglevel", "-l", help="Log level (default RSI_LOG_LEVEL)."),
    supervise: bool = typer.Option(
        True, "--supervise/--no-supervise", help="Restart the worker process when it dies on its own."
    ),
) -> None:
    """Run a Celery worker of rsi-worker's tasks (extra arguments go to `celery worker`).

    By default the worker runs as a supervised child process that is restarted when it dies on
    its own (see :mod:`rsi_worker.local.supervise`); ``--no-supervise`` runs it in this process.

    Logs follow ``RSI_LOG_FORMAT`` / ``RSI_LOG_LEVEL``; with ``RSI_METRICS_PORT`` set the worker serves
    Prometheus metrics on that port (``/metrics``).
    """
    from rsi_common.config import Settings
    from rsi_worker.cluster.app import create_app

    settings = Settings()
    if not settings.redis_url:
        typer.echo(
            "rsi worker needs RSI_REDIS_URL (the broker); `rsi demo` runs an embedded cluster", err=True
        )
        raise typer.Exit(2)
    level = _logging(settings, loglevel)  # the supervisor's own lines follow RSI_LOG_FORMAT too
    if supervise:
        import sys

        from rsi_worker.local.supervise import supervise as run_supervised

        child = [
            sys.executable,
            "-m",
            "rsi_worker.cli",
            "worker",
            "--no-supervise",
            "-Q",
            queues,
            "-c",
            str(concurrency),
            "-P",
            pool,
        ]
        child += (["-n", hostname] if hostname else []) + (["-l", loglevel] if loglevel else [])
        raise typer.Exit(run_supervised(child + list(ctx.args)))
    app_ = create_app(settings)
    argv = [*_quiet(settings), "worker", "-Q", queues, "-c", str(concurrency), "-P", pool, "-l", level,
            *(["-E"] if settings.task_events else [])]
    if hostname:
        argv += ["-n", hostname]
    app_.worker_main(argv + list(ctx.args))


def beat(
    ctx: typer.Context,
    loglevel: str | None = typer.Option(None, "--loglevel", "-l", help="Log level (default RSI_LOG_LEVEL)."),
) -> None:
    """Run Celery beat: the periodic sweeper (stale runs, pending turns, un-enqueued worlds).

    Run exactly one beat per cluster (the Kubernetes Deployment has one replica, Recreate strategy).
    """
    from rsi_common.config import Settings
    from rsi_worker.cluster.app import create_app
    from rsi_worker.observability.tracing import instrument_celery

    settings = Settings()
    level = _logging(settings, loglevel)
    instrument_celery(settings)
    app_ = create_app(settings)
    schedule = str(settings.home / "celerybeat-schedule")
    settings.home.mkdir(parents=True, exist_ok=True)
    app_.start([*_quiet(settings), "beat", "-l", level, "-s", schedule, *ctx.args])
