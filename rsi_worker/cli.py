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


@app.command()
def demo() -> None:
    """Run the one-command demo (embedded mode, sim model, no keys)."""
    typer.echo("rsi demo: not yet implemented — see README roadmap")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
