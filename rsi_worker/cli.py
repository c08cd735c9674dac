"""The ``rsi`` command (typer): assembled from :mod:`rsi_worker.commands`.

Every command that prints a table also takes ``--json`` for scripts.
"""

from __future__ import annotations

import typer

from rsi_worker.commands import admin, batch, bench, cluster, db, loadtest, worlds

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="rsi-worker: harnesses that improve from use."
)
cluster.register(app)
admin.register(app)
batch.register(app)
loadtest.register(app)
app.add_typer(db.db, name="db")
app.add_typer(bench.bench, name="bench")
app.add_typer(worlds.worlds, name="worlds")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
