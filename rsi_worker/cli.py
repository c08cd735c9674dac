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


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
