"""``rsi worlds``: move recorded turns in and out as JSON Lines (:mod:`rsi_worker.jobs.worldfile`).

``rsi worlds export A [--out FILE]`` writes agent A's stored worlds, newest last; a bad stored row
is repaired or skipped and said so on stderr.
``rsi worlds import FILE [--agent A] [--trigger] [--atomic]`` reads FILE as bytes, checks every line
(the input boundary first: size, UTF-8, depth), reports the bad ones with their line numbers and
reasons, stores the good ones, and exits 0 when at least one line was stored (or already present),
1 when every line failed. With ``--atomic`` nothing is stored when any line is bad (exit 1). Import
triggers no consolidation unless ``--trigger`` is given (once per agent, for its newest world):
see :mod:`rsi_worker.jobs.worldfile`.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

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
    from rsi_worker.jobs.worldfile import ExportNote, ImportReport

worlds = typer.Typer(no_args_is_help=True, help="Export and import recorded turns (JSON Lines).")

__all__ = ["worlds"]

OUT_OPT = typer.Option(None, "--out", "-o", help="Output file (default: stdout).")
FILE_ARG = typer.Argument(..., help="A JSON Lines file ('-' for stdin).")
TRIGGER_HELP = "Trigger one consolidation per agent that got new worlds (needs RSI_REDIS_URL)."
ATOMIC_HELP = "Store every line in one transaction, or nothing when any line is bad."


@worlds.command("export")
def export_cmd(
    agent: str = typer.Argument(..., help="The agent whose worlds are exported."),
    out: Path | None = OUT_OPT,
) -> None:
    """Write AGENT's stored worlds as JSON Lines, one turn per line, newest last.

    A stored row that cannot be written as stored is repaired (invalid characters replaced) or
    skipped (undecodable); each is named on stderr with its world id and reason, followed by a
    count. The exit code stays 0: every row that could be exported was.
    """
    from rsi_common.db import make_engine, session_factory
    from rsi_worker.jobs.worldfile import export_lines

    notes: list[ExportNote] = []
    with cli_errors():
        engine = make_engine(load_settings().database_url)
        try:
            check_schema(engine)
            with session_factory(engine)() as s:
                s.connection(execution_options={"sqlite_begin": "DEFERRED"})
                lines = list(export_lines(s, agent, notes))
        finally:
            engine.dispose()
    text = "".join(line + "\n" for line in lines)
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        out.write_text(text, encoding="utf-8")
        typer.echo(f"{len(lines)} world(s) of {agent} written to {out}", err=True)
    _print_notes(notes)


def _print_notes(notes: list[ExportNote]) -> None:
    """One stderr line per repaired or skipped row, then the counts (nothing when all were clean)."""
    for note in notes:
        typer.echo(note.line(), err=True)
    if notes:
        skipped = sum(1 for n in notes if n.action == "skipped")
        typer.echo(f"{skipped} world(s) skipped, {len(notes) - skipped} repaired", err=True)


@worlds.command("import")
def import_cmd(
    file: Path = FILE_ARG,
    agent: str | None = typer.Option(None, "--agent", help="Store every line under this agent id."),
    trigger: bool = typer.Option(False, "--trigger", help=TRIGGER_HELP),
    atomic: bool = typer.Option(False, "--atomic", help=ATOMIC_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Import worlds from FILE; bad lines are reported with their line numbers and skipped."""
    if str(file) != "-" and not file.is_file():
        fail(f"no such file: {file}", code=EXIT_INPUT, as_json=as_json)
    with cli_errors(as_json):
        settings = load_settings()
        if trigger and not settings.redis_url:
            fail("--trigger needs RSI_REDIS_URL (the broker)", code=EXIT_SETUP, as_json=as_json)
        report = _run_import(settings, file, agent, trigger, atomic)
    if as_json:
        echo_json(report.to_json())
    else:
        _print_report(report)
    if not report.committed or (report.lines and not report.imported and not report.existing):
        raise typer.Exit(EXIT_INPUT)


def _run_import(settings: Settings, file: Path, agent: str | None, trigger: bool,
                atomic: bool) -> ImportReport:
    from rsi_common.db import make_engine, session_factory
    from rsi_worker.jobs.worldfile import import_lines, read_lines, trigger_imported

    engine = make_engine(settings.database_url)
    try:
        check_schema(engine)
        sessions = session_factory(engine)
        with _open(file) as stream:
            report = import_lines(sessions, read_lines(stream), agent=agent,
                                  retention=settings.world_retention, enqueued=not trigger, atomic=atomic)
        if trigger and report.agents:
            from rsi_worker.commands.common import open_client

            client = open_client(settings)
            try:
                trigger_imported(sessions, client.coord, client.dispatcher, report)
            finally:
                client.close()
        return report
    finally:
        engine.dispose()


def _open(file: Path) -> contextlib.AbstractContextManager[BinaryIO]:
    """The file as bytes: lines are decoded one by one, so a bad byte fails its line only."""
    if str(file) == "-":
        return contextlib.nullcontext(sys.stdin.buffer)
    return open(file, "rb")


def _print_report(report: ImportReport) -> None:
    from rich.console import Console
    from rich.table import Table

    err = Console(stderr=True)
    if report.errors:
        table = Table(title=f"{len(report.errors)} line(s) skipped")
        table.add_column("line", justify="right")
        table.add_column("reason", overflow="fold")
        for e in report.errors:
            table.add_row(str(e.line), e.reason)
        err.print(table)
    summary = Table(title="rsi worlds import")
    summary.add_column("agent")
    summary.add_column("imported", justify="right")
    summary.add_column("trigger")
    for agent_id, ids in report.agents.items():
        summary.add_row(agent_id, str(len(ids)), report.triggered.get(agent_id, "-"))
    Console().print(summary)
    if not report.committed:
        typer.echo(f"--atomic: {len(report.errors)} bad line(s); nothing was imported")
        return
    typer.echo(f"{report.imported} imported, {report.existing} already stored, {len(report.errors)} skipped"
               + (f", {report.removed_by_retention} removed by retention" if report.removed_by_retention
                  else ""))
