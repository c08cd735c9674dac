"""``rsi demo``: the whole loop on an embedded cluster, with the sim model and no keys.

A shopping assistant answers a comparison (with a tool call), the user corrects the format in the
next message, the turn's consolidation runs on the cluster (shown step by step), the RRSI rules
adopt a candidate harness, and the next live turn follows the learned instruction.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn
from rich.syntax import Syntax
from rich.table import Table

from rsi_common.client import RsiClient, RunInfo
from rsi_common.config import Settings
from rsi_common.errors import UnknownAgentError
from rsi_common.llm import ModelClient, make_client
from rsi_worker.jobs.scenario import CORRECTION, next_history, turn_plan

__all__ = ["demo"]

AGENT = "demo-shop"
FIRST = "Compare laptops: use search query=laptops"
NEXT = "Compare phones: use search query=phones"
PHASES = {
    "open": "reading the user's signals",
    "incumbent": "replaying recent turns under the current harness",
    "drafting": "analysing failures and drafting candidate harnesses",
    "candidates": "replaying turns under each candidate (early stop on)",
}


def _turn(
    console: Console,
    client: RsiClient,
    policy: ModelClient,
    conv: str,
    n: int,
    text: str,
    history: list[dict[str, Any]],
) -> tuple[Any, list[dict[str, Any]]]:
    result = client.run_turn(AGENT, turn_plan(AGENT, conv, n, text, history), policy)
    calls = (result.world or {}).get("tools", {}).get("calls", [])
    tools = ", ".join(f"{c['name']}({json.dumps(c['input'])})" for c in calls) or "none"
    console.print(
        Panel(
            result.answer,
            title=f"[bold]user:[/] {text}",
            subtitle=f"tool calls: {tools}",
            title_align="left",
            subtitle_align="left",
        )
    )
    return result, next_history(history, text, result.answer)


def _narrate(console: Console, shown: list[str], phase: str) -> None:
    """Print the phases up to ``phase`` that were not printed yet (fast ones happen between polls)."""
    order = list(PHASES)
    upto = order.index(phase) + 1 if phase in order else 0
    for p in order[:upto]:
        if p not in shown:
            shown.append(p)
            console.print(f"  [green]•[/] {PHASES[p]}")


def _watch(console: Console, client: RsiClient, after: set[str], timeout_s: float = 90.0) -> RunInfo:
    """Follow the agent's runs until one that is not in ``after`` decides something."""
    deadline = time.monotonic() + timeout_s
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
    )
    shown: list[str] = []
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task("waiting for the consolidation to start", total=None)
        while time.monotonic() < deadline:
            new = [r for r in client.runs(AGENT, limit=10) if r.run_id not in after]
            running = [r for r in new if r.status == "running"]
            decided = [r for r in new if r.status in ("adopted", "kept", "failed")]
            if decided and not running:
                if ((decided[0].result or {}).get("round") or {}).get("candidates"):
                    _narrate(console, shown, "candidates")
                console.print(f"  [green]•[/] judged by the RRSI rules: {decided[0].status}")
                return decided[0]
            if running:
                p = client.progress(running[0].run_id)
                _narrate(console, shown, p.phase)
                progress.update(
                    bar,
                    description=PHASES.get(p.phase, p.phase),
                    completed=p.trials_done,
                    total=max(1, p.trials_total),
                )
            time.sleep(0.1)
    console.print("[red]the consolidation did not finish in time; see the worker logs[/]")
    raise typer.Exit(1)


def _decision(console: Console, run: RunInfo) -> None:
    rnd = (run.result or {}).get("round") or {}
    table = Table(title=f"run {run.run_id}: {run.status} — {run.reason}")
    for col in ("variant", "outcome", "S", "ΔS", "ΔC", "components", "rule"):
        table.add_column(col)
    inc = rnd.get("incumbent") or {}
    table.add_row(
        "incumbent", "", str(inc.get("S")), "", "", "", f"δ = {rnd.get('delta')}, S★ = {rnd.get('S_star')}"
    )
    for c in rnd.get("candidates", []):
        table.add_row(
            c["variant"],
            c["outcome"],
            str(c["S"]),
            str(c["delta_S"]),
            str(c["delta_C"]),
            ", ".join(c["components"]),
            c["reason_code"],
        )
    console.print(table)
    for c in rnd.get("candidates", []):
        console.print(f"  {c['variant']}: {c['reason']}")


def demo(
    fresh: bool = typer.Option(False, "--fresh", help="Start from an empty demo home (repeatable runs)."),
    home: str = typer.Option(".rsi/demo", "--home", help="Where the demo cluster keeps its state."),
    latency_ms: float = typer.Option(
        150.0, "--latency-ms", help="Sim model latency per call (makes the steps visible)."
    ),
    serve: bool = typer.Option(False, "--serve", help="Then leave the web console up on the demo's data."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Console port with --serve (0: any)."),
    runtime: bool = typer.Option(False, "--runtime", help="The agent runtime demo instead: delegation, "
                                 "messages, a refine adopted through the gate, a refused exploit."),
) -> None:
    """Run the one-command demo (embedded mode, sim model, no keys)."""
    if runtime:
        from rsi_worker.jobs.runtime_demo import run_runtime_demo

        steps = run_runtime_demo(Path(home) / "runtime", lambda line: Console().print(line, highlight=False))
        if not all(s.ok for s in steps):
            raise typer.Exit(1)
        return
    from rsi_worker.local.embedded import IN_PROCESS_NOTICE, EmbeddedCluster

    console = Console()
    root = Path(home)
    settings = Settings(home=root)  # invalid settings stop here, before anything is removed
    if fresh and root.exists():
        shutil.rmtree(root)
    settings = settings.model_copy(update={"sim": settings.sim.model_copy(update={"latency_ms": latency_ms})})
    t0 = time.monotonic()
    with EmbeddedCluster(settings, workers=2) as cluster:
        cluster.wait_ready()
        console.rule(f"rsi-worker demo — {cluster.mode} cluster under {home}")
        if cluster.mode == "in-process":
            console.print(f"[yellow]{IN_PROCESS_NOTICE}[/]")
        with cluster.client() as client:
            _run_demo(console, client, cluster.settings)
            console.rule(f"done in {time.monotonic() - t0:.1f} s")
            if serve:
                from rsi_worker.service.demo import serve_demo

                serve_demo(cluster.settings, client, host="127.0.0.1", port=port, agent=AGENT,
                           say=lambda line: console.print(line, soft_wrap=True, highlight=False))


def _run_demo(console: Console, client: RsiClient, settings: Settings) -> None:
    policy = make_client("sim", "sim-1", settings, role="policy")
    try:
        start, seen = client.agent(AGENT).current_version, {r.run_id for r in client.runs(AGENT)}
    except UnknownAgentError:
        start, seen = None, set()
    console.print("[bold]1. Live turns[/] (the agent's harness is H0; every turn is recorded as a world)")
    session = secrets.token_hex(3)  # fresh conversation ids: a demo without --fresh continues the agent
    _, history = _turn(console, client, policy, f"{session}-1", 1, FIRST, [])
    console.print("[bold]2. The user corrects the answer in the next message[/]")
    _turn(console, client, policy, f"{session}-1", 2, CORRECTION, history)
    console.print("[bold]3. Consolidation on the cluster[/] (background; the turn did not wait)")
    run = _watch(console, client, seen)
    _decision(console, run)
    if run.adopted_version:
        console.print(f"[bold]4. Adopted[/] {run.adopted_version[:23]}… — the harness diff:")
        console.print(Syntax(client.diff(AGENT, start, run.adopted_version), "diff", word_wrap=True))
    console.print("[bold]5. The next live turn uses the adopted harness[/]")
    _turn(console, client, policy, f"{session}-2", 1, NEXT, [])
    console.print("[bold]6. Lineage and run record[/]")
    lineage = Table("version", "parent", "run", "created")
    for v in client.lineage(AGENT):
        lineage.add_row(
            v.version[:23] + "…", (v.parent_version or "h0")[:23], v.run_id or "", str(v.created_at)
        )
    console.print(lineage)
    console.print_json(json.dumps(run.result or {}, default=str))
