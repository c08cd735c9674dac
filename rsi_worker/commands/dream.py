"""``rsi dream``: the Dream-RSI exploration-policy cycle (docs/dream/README.md).

``explore AGENT`` runs the agent's current exploration policy on a simulated search task and stores
the tree; ``cycle AGENT`` runs (or resumes) a cycle, printing its progress on stderr; ``status AGENT``
lists the cycles; ``export AGENT`` / ``import FILE --agent A`` move trees as JSON Lines.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rsi_worker.commands.common import EXIT_INPUT, check_schema, cli_errors, echo_json, fail, load_settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from rsi_common.config import Settings
    from rsi_common.llm.base import ModelClient

dream = typer.Typer(no_args_is_help=True, help="The Dream-RSI exploration-policy cycle.")

__all__ = ["dream"]

JSON_OPT = typer.Option(False, "--json", help="Print the result as JSON.")
OUT_OPT = typer.Option(None, "--out", "-o", help="Output file (default: stdout).")
FILE_ARG = typer.Argument(..., help="A JSON Lines file of trees ('-' for stdin).")
CONFIRM_HELP = "Confirm by a live cycle before promotion (off: pending_confirmation)."
CLUSTER_HELP = "Fan the episodes out on the workers (RSI_REDIS_URL)."
ADAPTER_HELP = (
    "Live tasks from your adapter, module:factory (factory(task_id) -> a search task; "
    "docs/dream/cycle.md#task-adapters). Default: simulated tasks."
)


@contextmanager
def _sessions() -> Iterator[sessionmaker[Session]]:
    from rsi_common.db import make_engine, session_factory

    engine = make_engine(load_settings().database_url)
    try:
        check_schema(engine)
        yield session_factory(engine)
    finally:
        engine.dispose()


@dream.command("explore")
def explore_cmd(
    agent: str = typer.Argument(..., help="The agent whose exploration policy explores."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulated search task."),
    task: str | None = typer.Option(None, "--task", help="Task id (default <agent>-explore-<n>)."),
    beta: float | None = typer.Option(None, "--beta", min=0.0, max=1.0, help="β (default: the policy's)."),
    as_json: bool = JSON_OPT,
) -> None:
    """Explore one simulated search task live with the agent's current policy and store the tree."""
    from rsi_common.db.dream import dream_worlds
    from rsi_worker.dream.cycle import explore
    from rsi_worker.dream.simtasks import SimSearchTask

    with cli_errors(as_json), _sessions() as factory:
        if task is None:
            with factory() as s:
                task = f"{agent}-explore-{len(dream_worlds(s, agent)) + 1}"
        out = explore(factory, agent, SimSearchTask(seed, task), beta=beta)
    if as_json:
        echo_json(out)
    else:
        typer.echo(
            f"{out['policy']} at beta {out['beta']}: best {out['best_score']:.4f} in {out['cells']} "
            f"evaluated cell(s), {out['tokens']} tokens, stop {out['stop_reason']}; tree {out['world_id']}"
            f"{'' if out['stored'] else ' (already stored)'}"
        )


@dream.command("cycle")
def cycle_cmd(
    agent: str = typer.Argument(..., help="The agent."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulated tasks and the sim development agent."),
    revisions: int = typer.Option(3, "--revisions", min=0, max=10, help="M − 1 revisions."),
    confirm: bool = typer.Option(
        True,
        "--confirm/--no-confirm",
        help=CONFIRM_HELP,
    ),
    cluster: bool = typer.Option(False, "--cluster", help=CLUSTER_HELP),
    provider: str = typer.Option(
        "sim", "--provider", help="The development agent's provider (default the sim)."
    ),
    model: str = typer.Option("sim-1", "--model", help="The development agent's model."),
    adapter: str | None = typer.Option(None, "--adapter", help=ADAPTER_HELP),
    as_json: bool = JSON_OPT,
) -> None:
    """Run the agent's Dream cycle, or resume its unfinished one (progress on stderr)."""
    from rsi_worker.dream.adapter import load_adapter
    from rsi_worker.dream.cycle import CycleConfig, run_cycle

    with cli_errors(as_json):
        if adapter is not None:
            load_adapter(adapter)  # refused here, before anything is stored
    with cli_errors(as_json), _sessions() as factory:
        settings = load_settings()
        executor_for = None
        if cluster:
            if not settings.redis_url:
                fail("--cluster needs RSI_REDIS_URL (the broker)", code=EXIT_INPUT, as_json=as_json)
            from rsi_worker.cluster.app import create_app
            from rsi_worker.cluster.dream_tasks import CeleryExecutor

            app = create_app(settings)

            def executor_for(cycle_id: str) -> CeleryExecutor:
                return CeleryExecutor(app, factory, cycle_id)

        out = run_cycle(
            factory,
            agent,
            _dev(provider, model, settings),
            CycleConfig(seed=seed, revisions=revisions, confirm=confirm, adapter=adapter),
            executor_for=executor_for,
            progress=lambda m: typer.echo(m, err=True),
        )
    brief = {
        k: out.get(k)
        for k in (
            "cycle_id",
            "iteration",
            "status",
            "V",
            "m_star",
            "next_beta",
            "promoted_version",
            "confirm",
        )
    }
    if as_json:
        echo_json(brief)
    else:
        typer.echo(f"{out['cycle_id']}: {out['status']}")


def _dev(provider: str, model: str, settings: Settings) -> ModelClient:
    """The development agent: the sim in role ``dream_dev``, else the provider's client (its
    consolidation-role retries; real clients ignore the role name)."""
    from rsi_common.llm.factory import make_client
    from rsi_worker.dream.devagent import dev_client

    if provider == "sim":
        return dev_client("sim", model, settings.sim)
    return make_client(provider, model, settings, role="proposer")


@dream.command("status")
def status_cmd(agent: str = typer.Argument(..., help="The agent."), as_json: bool = JSON_OPT) -> None:
    """The agent's cycles: status, phase, V per version, m★, next β, promoted version."""
    from rsi_worker.dream.cycle import cycle_rows

    with cli_errors(as_json), _sessions() as factory:
        rows = cycle_rows(factory, agent)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        typer.echo(f"{agent}: no Dream cycle yet")
    for r in rows:
        vs = ", ".join(f"{v:.4f}" for v in r["V"] or [])
        typer.echo(
            f"#{r['iteration']} {r['cycle_id']} {r['status']} (phase {r['phase']}) V=[{vs}] "
            f"m*={r['m_star']} next beta={r['next_beta']} version={r['promoted_version'] or '-'}"
        )


@dream.command("export")
def export_cmd(
    agent: str = typer.Argument(..., help="The agent whose trees are exported."),
    out: Path | None = OUT_OPT,
) -> None:
    """Write AGENT's trees as JSON Lines (``rsi-dream-world/1``), oldest first."""
    from rsi_common.db.dream import dream_worlds
    from rsi_worker.dream.tree import dump_lines, load_world

    with cli_errors(), _sessions() as factory, factory() as s:
        lines = list(dump_lines(load_world(r.tree) for r in dream_worlds(s, agent)))
    text = "".join(line + "\n" for line in lines)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        typer.echo(f"{len(lines)} tree(s) of {agent} written to {out}", err=True)


@dream.command("import")
def import_cmd(
    file: Path = FILE_ARG,
    agent: str = typer.Option(..., "--agent", help="Store the trees under this agent."),
    atomic: bool = typer.Option(False, "--atomic", help="Store nothing when any line is bad."),
    as_json: bool = JSON_OPT,
) -> None:
    """Import trees; bad lines are reported with their line number and the field, and skipped."""
    from rsi_worker.dream.cycle import import_trees

    if str(file) != "-" and not file.is_file():
        fail(f"no such file: {file}", code=EXIT_INPUT, as_json=as_json)
    data = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
    with cli_errors(as_json), _sessions() as factory:
        report = import_trees(factory, agent, data.splitlines(), atomic=atomic)
    if as_json:
        echo_json(report)
    else:
        for e in report["errors"]:
            typer.echo(str(e["error"]), err=True)  # the error names its line
        typer.echo(
            f"{report['imported']} imported, {report['existing']} already stored, "
            f"{len(report['errors'])} bad line(s)"
        )
    if report["errors"] and (atomic or not report["imported"] + report["existing"]):
        raise typer.Exit(EXIT_INPUT)
