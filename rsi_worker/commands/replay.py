"""``rsi runs replay RUN --inline``: re-run a run from its recorded inputs
(docs/operations/chaos.md#reproducible-runs; the logic is :mod:`rsi_worker.jobs.replay_run`).

Exit codes: 0 — the decision is the same; 1 — it differs, or the run cannot be replayed (no
recorded inputs, a world gone or altered); 2 — setup error.
"""

from __future__ import annotations

import json

import typer

from rsi_worker.commands.common import cli_errors, load_settings

__all__ = ["replay_cmd"]


def replay_cmd(run_id: str, *, inline: bool, as_json: bool) -> None:
    """Replay ``run_id`` and print the comparison."""
    if not inline:
        typer.echo("error: only --inline replays are supported: rsi runs replay RUN --inline", err=True)
        raise typer.Exit(2)
    from rsi_worker.cluster.worker import load_model_factory
    from rsi_worker.jobs.replay_run import replay_inline

    with cli_errors(as_json):  # a run without inputs, a world gone or altered: exit 1, named
        settings = load_settings()
        report = replay_inline(settings, run_id, load_model_factory(settings))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        verdict = "the same decision" if report["same"] else "a DIFFERENT decision"
        typer.echo(f"run {run_id} (inputs {report['inputs_digest'][:12]}): {verdict}")
        typer.echo(f"  stored:   {json.dumps(report['original'])}")
        typer.echo(f"  replayed: {json.dumps(report['replayed'])}")
        for note in report["notes"]:
            typer.echo(f"  note: {note}")
    if not report["same"]:
        raise typer.Exit(1)
