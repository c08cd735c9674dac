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
