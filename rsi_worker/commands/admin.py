"""Managing agents' harness versions: ``rsi runs``, ``rsi lineage``, ``rsi diff``, ``rsi rollback``,
``rsi pin``, ``rsi freeze``, ``rsi unfreeze`` (docs/algorithm/consolidation.md §3.12.10), all through the
host API
(:class:`~rsi_common.client.RsiClient`, built from the ``RSI_*`` settings).

A version argument ``V`` is a stored version id (``sha256:<hex>``), ``h0`` (the builtin starting
harness), or a unique prefix of a stored version — of the whole id or of its hex digits, at least
:data:`MIN_PREFIX` hex digits (``sha256:3fa1`` or ``3fa1``). Every command takes ``--json``; exit
codes are those of :mod:`rsi_worker.commands.common` (unknown agent or version: 1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import typer

from rsi_worker.commands.common import cli_errors, echo_json, load_settings, open_client, short_version

if TYPE_CHECKING:
    from rsi_common.client import AgentInfo, RsiClient, RunInfo, VersionInfo

__all__ = ["MIN_PREFIX", "register", "resolve_version"]

MIN_PREFIX = 4
"""Fewest hex digits a version prefix must have."""

JSON_OPT = typer.Option(False, "--json", help="Print the result as JSON (for scripts).")
AGENT_ARG = typer.Argument(..., help="The agent id.")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("runs")(runs_cmd)
    app.command("lineage")(lineage_cmd)
    app.command("diff")(diff_cmd)
    app.command("rollback")(rollback_cmd)
    app.command("pin")(pin_cmd)
    app.command("freeze")(freeze_cmd)
    app.command("unfreeze")(unfreeze_cmd)


@contextlib.contextmanager
def _client(as_json: bool) -> Iterator[RsiClient]:
    with cli_errors(as_json):
        client = open_client(load_settings())
        try:
            yield client
        finally:
            client.close()


def resolve_version(client: RsiClient, agent: str, text: str) -> str | None:
    """The stored version ``text`` names for ``agent`` (``None`` = H0; module docstring).

    Raises:
        UnknownAgentError: no such agent.
        UnknownVersionError: nothing stored matches.
        InvalidInput: the prefix is too short or matches several versions.
    """
    from rsi_common.errors import InvalidInput, UnknownVersionError
    from rsi_common.harness import H0_VERSION

    wanted = text.strip()
    stored = [v.version for v in client.lineage(agent)]
    if wanted.lower() == "h0" or wanted == H0_VERSION:
        return None
    if wanted in stored:
        return wanted
    digits = wanted.partition(":")[2] if ":" in wanted else wanted
    if len(digits) < MIN_PREFIX:
        raise InvalidInput(f"version {wanted!r}: give a stored version id, h0, or at least "
                           f"{MIN_PREFIX} hex digits of one")
    candidates = {v: v for v in stored}
    candidates.setdefault(H0_VERSION, "h0")
    hits = sorted({name for v, name in candidates.items()
                   if v.startswith(wanted) or v.partition(":")[2].startswith(wanted)})
    if not hits:
        raise UnknownVersionError(f"agent {agent!r} has no stored harness version {wanted!r}")
    if len(hits) > 1:
        raise InvalidInput(f"version prefix {wanted!r} is ambiguous for agent {agent!r}: "
                           + ", ".join(short_version(h) if h != "h0" else h for h in hits))
    return None if hits[0] == "h0" else hits[0]


def _console() -> Any:
    from rich.console import Console

    return Console()


def _reason(summary: dict[str, Any] | None, limit: int = 70) -> str:
    text = str((summary or {}).get("reason") or "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def runs_cmd(
    agent: str = AGENT_ARG,
    run_id: str | None = typer.Argument(None, help="With `replay`: the run to replay."),
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="How many of the newest runs."),
    inline: bool = typer.Option(False, "--inline", help="With `replay`: re-run in this process."),
    as_json: bool = JSON_OPT,
) -> None:
    """List AGENT's latest consolidation runs, newest first; `rsi runs replay RUN --inline` re-runs a
    run from its recorded inputs and says whether the decision is the same
    (docs/operations/chaos.md#reproducible-runs)."""
    if agent == "replay" and run_id is not None:
        from rsi_worker.commands.replay import replay_cmd

        replay_cmd(run_id, inline=inline, as_json=as_json)
        return
    with _client(as_json) as client:
        rows = client.runs(agent, limit=limit)
    if as_json:
        echo_json(rows)
        return
    _print_runs(agent, rows)


def _print_runs(agent: str, rows: list[RunInfo]) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title=f"runs of {agent} (newest first)", box=box.SIMPLE_HEAD)
    table.add_column("run", overflow="fold", min_width=14)
    table.add_column("kind", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("reason", overflow="fold", ratio=1, min_width=16)
    table.add_column("start → adopted", overflow="fold")
    table.add_column("started (UTC)", overflow="fold")
    table.add_column("s", justify="right", no_wrap=True)
    for r in rows:
        took = (r.finished_at - r.started_at).total_seconds() if r.finished_at else None
        moved = short_version(r.start_version, 8)
        if r.adopted_version:
            moved += f" → {short_version(r.adopted_version, 8)}"
        table.add_row(r.run_id, r.kind, r.status, _reason({"reason": r.reason}), moved,
                      r.started_at.strftime("%m-%d %H:%M:%S"), "" if took is None else f"{took:.1f}")
    _console().print(table if rows else f"agent {agent} has no runs")


def lineage_cmd(agent: str = AGENT_ARG, as_json: bool = JSON_OPT) -> None:
    """List AGENT's stored harness versions (oldest first) with their provenance."""
    with _client(as_json) as client:
        info = client.agent(agent)
        versions = client.lineage(agent)
    if as_json:
        echo_json({"agent": info, "versions": versions})
        return
    _print_lineage(info, versions)


def _print_lineage(info: AgentInfo, versions: list[VersionInfo]) -> None:
    from rich import box
    from rich.table import Table

    state = "frozen" if info.frozen else "consolidating"
    current = short_version(info.current_version)
    table = Table(title=f"lineage of {info.agent_id} (current: {current}, {state})", box=box.SIMPLE_HEAD)
    table.add_column("", no_wrap=True)
    for col in ("version", "parent"):
        table.add_column(col, no_wrap=True)
    table.add_column("run", overflow="fold", min_width=14)
    table.add_column("created (UTC)", overflow="fold")
    table.add_column("summary", overflow="fold", ratio=1, min_width=16)
    table.add_column("lessons", overflow="fold", min_width=10)
    table.add_row("*" if info.current_version is None else "", "h0", "", "", "", "the builtin harness", "")
    for v in versions:
        mark = "*" if v.version == info.current_version else ""
        table.add_row(mark, short_version(v.version), short_version(v.parent_version), v.run_id or "",
                      v.created_at.strftime("%Y-%m-%d %H:%M:%S"), _reason(v.summary),
                      "; ".join(str(x["lesson"]) for x in v.lessons))
    _console().print(table)


def diff_cmd(
    agent: str = AGENT_ARG,
    v1: str = typer.Argument(..., help="From: version id, h0, or a unique prefix."),
    v2: str = typer.Argument(..., help="To: version id, h0, or a unique prefix."),
    as_json: bool = JSON_OPT,
) -> None:
    """Unified diff of two of AGENT's harness versions (manifest.json and every file)."""
    with _client(as_json) as client:
        a, b = resolve_version(client, agent, v1), resolve_version(client, agent, v2)
        text = client.diff(agent, a, b)
    if as_json:
        echo_json({"agent": agent, "from": a, "to": b, "identical": not text, "diff": text})
        return
    if not text:
        typer.echo(f"{short_version(a)} and {short_version(b)} are identical", err=True)
        return
    from rich.syntax import Syntax

    _console().print(Syntax(text, "diff", theme="ansi_dark", background_color="default"))


def _show(info: AgentInfo, what: str, as_json: bool) -> None:
    if as_json:
        echo_json(info)
        return
    state = "frozen" if info.frozen else "consolidating"
    typer.echo(f"{info.agent_id}: {what}; current version {info.current_version or 'h0'} ({state}); "
               "applies from the agent's next turn")


def rollback_cmd(
    agent: str = AGENT_ARG,
    version: str = typer.Argument(..., help="A stored version id, h0, or a unique prefix."),
    as_json: bool = JSON_OPT,
) -> None:
    """Make a stored VERSION of AGENT current (a run going meanwhile will not adopt)."""
    with _client(as_json) as client:
        info = client.rollback(agent, resolve_version(client, agent, version))
    _show(info, "rolled back", as_json)


def pin_cmd(
    agent: str = AGENT_ARG,
    version: str = typer.Argument(..., help="A stored version id, h0, or a unique prefix."),
    as_json: bool = JSON_OPT,
) -> None:
    """Make VERSION current and freeze AGENT (no further consolidation until unfrozen)."""
    with _client(as_json) as client:
        info = client.pin(agent, resolve_version(client, agent, version))
    _show(info, "pinned", as_json)


def freeze_cmd(agent: str = AGENT_ARG, as_json: bool = JSON_OPT) -> None:
    """Stop consolidating AGENT (its turns are still recorded)."""
    with _client(as_json) as client:
        info = client.freeze(agent)
    _show(info, "frozen", as_json)


def unfreeze_cmd(agent: str = AGENT_ARG, as_json: bool = JSON_OPT) -> None:
    """Resume consolidating AGENT from its next trigger."""
    with _client(as_json) as client:
        info = client.unfreeze(agent)
    _show(info, "unfrozen", as_json)
