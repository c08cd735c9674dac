"""``rsi harness``: harness versions in and out as checkpoint files (docs/operations.md#harness-checkpoints).

``rsi harness export AGENT [VERSION] [--out DIR]`` writes the checkpoint of a stored version (default:
the current one; ``h0`` names the builtin start) to ``DIR/sha256-<hex>.json`` and prints the path.
``rsi harness import AGENT FILE [--adopt]`` reads FILE (size checked before reading), verifies it
(format, version recomputed: a tampered file is refused, paths inside the harness), screens it against
the agent's current harness with the gate (:func:`~rsi_worker.gate.imported.import_reasons`: locks,
privileges, credentials and platform settings) and stores it as a version of the agent, its parent the
current version; ``--adopt`` also makes it current from the next turn. Nothing is stored when a check
fails (exit 1, every reason on stderr). Exit codes are those of :mod:`rsi_worker.commands.common`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from rsi_worker.commands.admin import resolve_version
from rsi_worker.commands.common import cli_errors, echo_json, fail, load_settings, open_client

harness = typer.Typer(no_args_is_help=True, help="Export and import harness versions (checkpoint files).")

__all__ = ["harness"]

JSON_OPT = typer.Option(False, "--json", help="Print the result as JSON (for scripts).")
OUT_OPT = typer.Option(Path("."), "--out", "-o", help="Directory the checkpoint file is written to.")
FILE_ARG = typer.Argument(..., help="A checkpoint file (rsi harness export writes them).")
ADOPT_OPT = typer.Option(False, "--adopt", help="Make the imported version current from the next turn.")


@harness.command("export")
def export_cmd(
    agent: str = typer.Argument(..., help="The agent id."),
    version: str = typer.Argument("current", help="A stored version, a prefix of one, h0, or 'current'."),
    out: Path = OUT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Write the checkpoint file of one of AGENT's versions and print its path."""
    from rsi_common.harness.checkpoint import checkpoint_filename, load_checkpoint

    with cli_errors(as_json):
        client = open_client(load_settings())
        try:
            v = (client.agent(agent).current_version if version == "current"
                 else resolve_version(client, agent, version))
            text = client.export_checkpoint(agent, v)
        finally:
            client.close()
    path = out / checkpoint_filename(load_checkpoint(text).harness.version)
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # a reader never sees half a file
    if as_json:
        echo_json({"agent": agent, "path": str(path)})
    else:
        typer.echo(str(path))


@harness.command("import")
def import_cmd(
    agent: str = typer.Argument(..., help="The agent id (created at H0 when new)."),
    file: Path = FILE_ARG,
    adopt: bool = ADOPT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Verify, screen and store a checkpoint file as a version of AGENT."""
    from rsi_common.boundary import MAX_CHECKPOINT_BYTES
    from rsi_common.errors import UnknownAgentError
    from rsi_common.harness.checkpoint import load_checkpoint
    from rsi_worker.gate.imported import import_reasons

    try:
        size = file.stat().st_size
    except OSError as exc:
        fail(f"{file}: cannot read ({type(exc).__name__})", as_json=as_json)
    if size > MAX_CHECKPOINT_BYTES:
        fail(f"{file}: {size} bytes, over the checkpoint limit of {MAX_CHECKPOINT_BYTES}", as_json=as_json,
             kind="ManifestLimitError")
    settings = load_settings()
    with cli_errors(as_json):
        checkpoint = load_checkpoint(file.read_bytes())
        client = open_client(settings)
        try:
            try:
                current_version = client.agent(agent).current_version
            except UnknownAgentError:
                current_version = None
            current = client.stored_harness(agent, current_version)
            reasons = import_reasons(current, checkpoint.harness, settings.consolidation.ceilings)
            if reasons:
                fail(f"{file}: refused by the gate: " + "; ".join(reasons), as_json=as_json,
                     kind="GateRefused")
            info = client.import_version(agent, checkpoint, expected_current=current_version, adopt=adopt)
        finally:
            client.close()
    if as_json:
        echo_json({"agent": agent, "version": info.version, "parent": info.parent_version, "adopted": adopt})
    else:
        typer.echo(f"{agent}: stored {info.version}" + (" (current from the next turn)" if adopt else ""))

