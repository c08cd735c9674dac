"""The ``rsi`` command (typer): assembled from :mod:`rsi_worker.commands`.

Every command that prints a table also takes ``--json`` for scripts.

Every command runs inside :class:`RsiGroup`, the one place that turns the project's errors into an
exit code and one line on stderr (:func:`~rsi_worker.commands.common.cli_errors`): a settings error
(``RSI_*`` invalid, unsupported URL scheme, a port out of range, ``b_min > b_max``, …) exits with
code 2 and never a traceback, whatever the command (``docs/operations/settings.md``).
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from rsi_worker.commands import admin, batch, bench, cluster, db, dream, harness, loadtest, service, worlds
from rsi_worker.commands import evolve as evolve_cmd
from rsi_worker.commands import runtime as runtime_cmd
from rsi_worker.commands.common import cli_errors


class RsiGroup(TyperGroup):
    """The root group: runs the chosen command inside :func:`cli_errors`."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click.Context
        with cli_errors():
            return super().invoke(ctx)


app = typer.Typer(
    cls=RsiGroup, add_completion=False, no_args_is_help=True,
    help="rsi-worker: harnesses that improve from use.",
)
cluster.register(app)
admin.register(app)
batch.register(app)
loadtest.register(app)
service.register(app)
app.add_typer(db.db, name="db")
app.add_typer(bench.bench, name="bench")
app.add_typer(worlds.worlds, name="worlds")
app.add_typer(harness.harness, name="harness")
app.add_typer(dream.dream, name="dream")
evolve_cmd.register(app)
app.add_typer(runtime_cmd.runtime, name="runtime")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
