"""``rsi batch``: re-consolidate many agents (e.g. after a model change); see :mod:`rsi_worker.jobs.batch`.

Runs go through the Celery cluster (``RSI_REDIS_URL``) or, with ``--inline``, through this process.
A second invocation with the same ``--name`` (the default name is derived from the selection)
resumes: agents whose batch run finished are not run again, interrupted ones are.
Exit codes: 0 done; 1 unknown agents, a bad selection or name, or some agent ended ``failed``,
``interrupted``, ``lost`` or ``busy``; 2 setup problems.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import typer

from rsi_worker.commands.common import (
    EXIT_INPUT,
    EXIT_SETUP,
    check_schema,
    cli_errors,
    echo_json,
    fail,
    load_settings,
)

if TYPE_CHECKING:
    from rsi_common.config import Settings
    from rsi_worker.jobs.batch import BatchReport, BatchRunner, Selection
    from rsi_worker.runtime import Runtime

__all__ = ["register"]

SINCE_FORMATS = ["%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]
AGENT_OPT = typer.Option(None, "--agent", "-a", help="An agent to re-consolidate (repeatable).")
SINCE_OPT = typer.Option(None, "--since", formats=SINCE_FORMATS,
                         help="Only agents with turns at or after this time (UTC).")


def register(app: typer.Typer) -> None:
    """Add this module's command to ``app``."""
    app.command("batch")(batch_cmd)


def batch_cmd(
    agent: list[str] | None = AGENT_OPT,
    all_agents: bool = typer.Option(False, "--all", help="Every stored agent."),
    since: datetime | None = SINCE_OPT,
    concurrency: int = typer.Option(4, "--concurrency", "-c", min=1, help="Agents in flight at once."),
    name: str | None = typer.Option(None, "--name", help="The batch's identity (default: the selection)."),
    inline: bool = typer.Option(False, "--inline", help="Run the consolidations in this process."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Re-run agents whose batch run failed."),
    attempts: int = typer.Option(3, "--attempts", min=1, help="Launches per agent (interrupted runs retry)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Re-consolidate the selected agents: every scored turn counts as fresh (forced runs)."""
    from rsi_worker.jobs.batch import Selection, batch_kind

    with cli_errors(as_json):
        selection = Selection(tuple(agent or ()), all_agents, since)
        selection.check()
        batch_name = name or selection.default_name()
        batch_kind(batch_name)
        settings = load_settings()
        if not inline and not settings.redis_url:
            fail("rsi batch needs RSI_REDIS_URL (the cluster's broker); use --inline to run here",
                 code=EXIT_SETUP, as_json=as_json)
        report = _run(settings, selection, batch_name, inline=inline, concurrency=concurrency,
                      attempts=attempts, retry_failed=retry_failed, quiet=as_json)
    if as_json:
        echo_json(report.to_json())
    else:
        _print_summary(report)
    if report.needs_attention:
        raise typer.Exit(EXIT_INPUT)


def _run(settings: Settings, selection: Selection, name: str, *, inline: bool, concurrency: int,
         attempts: int, retry_failed: bool, quiet: bool) -> BatchReport:
    from rsi_worker.cluster.worker import load_model_factory
    from rsi_worker.jobs.batch import select_agents
    from rsi_worker.runtime import open_runtime

    rt = open_runtime(settings, models=load_model_factory(settings) if inline else None)
    try:
        check_schema(rt.engine)
        with rt.sessions() as s:
            s.connection(execution_options={"sqlite_begin": "DEFERRED"})
            agents = select_agents(s, selection)
            s.rollback()
        runner = _runner(rt, name, inline=inline, concurrency=concurrency, attempts=attempts,
                         retry_failed=retry_failed)
        try:
            return _with_progress(runner, agents, name, quiet=quiet)
        finally:
            runner.launcher.close()
    finally:
        rt.close()


def _runner(rt: Runtime, name: str, *, inline: bool, concurrency: int, attempts: int,
            retry_failed: bool) -> BatchRunner:
    from rsi_worker.jobs.batch import BatchRunner, CeleryLauncher, InlineLauncher, Launcher, batch_kind

    kind = batch_kind(name)
    launcher: Launcher
    if inline:
        launcher = InlineLauncher(rt.deps, kind, concurrency=concurrency)
    else:
        from rsi_worker.cluster.app import create_app

        launcher = CeleryLauncher(create_app(rt.settings), kind)
    return BatchRunner(rt.sessions, rt.coord, launcher, name=name, concurrency=concurrency,
                       attempts=attempts, grace_s=float(rt.settings.lease_s),
                       wait_s=float(rt.settings.run_stale_s), retry_failed=retry_failed)


def _with_progress(runner: BatchRunner, agents: list[str], name: str, *, quiet: bool) -> BatchReport:
    from rsi_worker.commands.jobview import JobProgress

    with JobProgress.show("batch", name, len(agents), quiet=quiet) as progress:
        runner.on_outcome = lambda outcome: progress.advance(outcome.status)
        return runner.run(agents)


def _print_summary(report: BatchReport) -> None:
    from rsi_worker.commands.jobview import outcome_table

    by_status: dict[str, list[str]] = {}
    for o in report.outcomes.values():
        by_status.setdefault(o.status, []).append(o.agent_id)
    title = f"rsi batch {report.name} ({len(report.outcomes)} agents, {report.seconds:.1f} s)"
    outcome_table(title, by_status, unit="agents")
