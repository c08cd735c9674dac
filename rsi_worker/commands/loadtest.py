"""``rsi loadtest``: recorded turns at a fixed arrival rate through a real cluster.

The logic is :mod:`rsi_worker.jobs.loadtest` (traffic, drain, report) and :mod:`rsi_worker.jobs.loadpool`.

Against the configured cluster (``RSI_REDIS_URL`` / ``RSI_DATABASE_URL``, schema current), or with
``--embedded`` against a private one started for the run (:class:`~rsi_worker.local.embedded.EmbeddedCluster`,
``--workers`` processes; its home is a temporary directory unless ``--home`` is given). The workers'
model settings (e.g. ``RSI_SIM_LATENCY_MS``) come from the environment as usual.

Exit codes: 0 — the report says ``ok`` (every turn recorded, every agent's last turn consolidated,
no world missing); 1 — the load ran but something was lost or the drain timed out; 2 — setup error.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

__all__ = ["loadtest", "register"]


def register(app: typer.Typer) -> None:
    """Add ``rsi loadtest`` to ``app``."""
    app.command("loadtest")(loadtest)


@contextlib.contextmanager
def _client(embedded: bool, workers: int, concurrency: int, home: str | None) -> Iterator[tuple[Any, str]]:
    """``(RsiClient, mode)`` of the configured cluster or of a private embedded one."""
    from rsi_common.client import RsiClient
    from rsi_common.config import Settings

    settings = Settings()
    if not embedded:
        if not settings.redis_url:
            typer.echo("rsi loadtest needs RSI_REDIS_URL (or --embedded)", err=True)
            raise typer.Exit(2)
        from rsi_common.db import current_revision, head_revision

        client = RsiClient(settings)
        try:
            if current_revision(client.engine) != head_revision():
                typer.echo("the database schema is not current: run `rsi db upgrade` first", err=True)
                raise typer.Exit(2)
            yield client, "cluster"
        finally:
            client.close()
        return
    from rsi_worker.local.embedded import EmbeddedCluster

    with contextlib.ExitStack() as stack:
        tmp = None if home else stack.enter_context(tempfile.TemporaryDirectory(prefix="rsi-load-"))
        root = Path(home or str(tmp))
        base = settings.model_copy(update={"home": root})
        cluster = stack.enter_context(EmbeddedCluster(base, workers=workers, concurrency=concurrency))
        cluster.wait_ready(60.0)
        client = stack.enter_context(cluster.client())
        yield client, cluster.mode


def loadtest(
    rate: float = typer.Option(5.0, "--rate", min=0.01, help="Offered turns per second."),
    duration: float = typer.Option(20.0, "--duration", min=0.1, help="Seconds of offered load."),
    agents: int = typer.Option(10, "--agents", min=1, help="Agents the turns are spread over."),
    seed: int = typer.Option(0, "--seed", help="Seed of the generated world pool."),
    pool_size: int = typer.Option(48, "--pool-size", min=1, help="Conversations in the generated pool."),
    import_file: str | None = typer.Option(None, "--import", help="Worlds file (JSON Lines of `rsi worlds "
                                           "export`) to use as the pool instead of generating one."),
    embedded: bool = typer.Option(False, "--embedded", help="Start a private embedded cluster for the run."),
    workers: int = typer.Option(2, "--workers", min=1, help="Worker processes of --embedded."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Threads per --embedded worker."),
    home: str | None = typer.Option(None, "--home", help="Home of --embedded (default: a temporary dir)."),
    prefix: str = typer.Option("", "--agent-prefix", help="Agent id prefix (default load-<random hex>)."),
    senders: int = typer.Option(8, "--senders", min=1, help="Threads recording turns."),
    drain_timeout: float = typer.Option(120.0, "--drain-timeout", min=0.0,
                                        help="Seconds to wait for the last turns to be consolidated."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    chaos: bool = typer.Option(False, "--chaos", help="Inject faults into a private cluster started for the "
                               "run (implies --embedded; docs/operations/chaos.md)."),
    kills: int = typer.Option(20, "--kills", min=0, help="--chaos: kill -9 of random worker processes."),
    redis_restarts: int = typer.Option(1, "--redis-restarts", min=0, help="--chaos: redis-server restarts."),
    db_restarts: int = typer.Option(1, "--db-restarts", min=0, help="--chaos: PostgreSQL restarts."),
    broker_pauses: int = typer.Option(0, "--broker-pauses", min=0, help="--chaos: SIGSTOP of redis-server."),
    pause_s: float = typer.Option(5.0, "--pause-s", min=0.1, help="--chaos: seconds of one broker pause."),
) -> None:
    """Drive recorded turns at a fixed rate through the cluster and report throughput, latencies,
    runs, redeliveries, lease contention and lost turns."""
    from rsi_common.errors import InvalidInput
    from rsi_worker.jobs.loadpool import generate_pool, load_pool
    from rsi_worker.jobs.loadtest import LoadConfig, run_loadtest

    try:
        cfg = LoadConfig(rate=rate, duration_s=duration, agents=agents, prefix=prefix, senders=senders,
                         drain_timeout_s=drain_timeout)
        pool = load_pool(import_file) if import_file else generate_pool(seed, pool_size)
    except InvalidInput as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    info = {"source": import_file or f"generated (seed {seed})", "conversations": len(pool),
            "turns": sum(len(c.turns) for c in pool)}
    if chaos:
        from rsi_common.config import Settings
        from rsi_worker.chaos.faults import ChaosPlan
        from rsi_worker.chaos.run import run_chaos

        try:
            plan = ChaosPlan(duration, kills, redis_restarts, db_restarts, broker_pauses, pause_s, seed)
        except InvalidInput as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        report = run_chaos(Settings(), pool, cfg, plan, workers=workers, concurrency=concurrency, home=home,
                           pool_info=info)
    else:
        with _client(embedded, workers, concurrency, home) as (client, mode):
            report = run_loadtest(client, pool, cfg, mode=mode, pool_info=info)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        from rich.console import Console

        Console().print(report_table(report))
    if not report["ok"]:
        raise typer.Exit(1)


def _fmt(stats: dict[str, Any]) -> str:
    if not stats.get("n"):
        return "-"
    return f"p50 {stats['p50_ms']} ms, p99 {stats['p99_ms']} ms, max {stats['max_ms']} ms (n={stats['n']})"


def report_table(report: dict[str, Any]) -> Any:
    """The report as a rich table."""
    from rich.table import Table

    cfg, turns, lost = report["config"], report["turns"], report["lost"]
    table = Table(title=f"rsi loadtest — {cfg['rate']:g} turns/s × {cfg['duration_s']:g} s over "
                        f"{cfg['agents']} agents ({cfg['mode']}, agents {cfg['prefix']}-*)")
    table.add_column("metric")
    table.add_column("value")
    rows = [
        ("pool", f"{cfg['pool']['source']}: {cfg['pool']['conversations']} conversations, "
                 f"{cfg['pool']['turns']} turns"),
        ("turns offered / recorded / failed",
         f"{turns['offered']} / {turns['recorded']} / {turns['failed']}"),
        ("turns by kind", json.dumps(turns["by_kind"])),
        ("hand-off", json.dumps(turns["dispatched"])),
        ("throughput", f"{report['throughput_turns_per_s']} turns/s"),
        ("send lag", _fmt(report["send_lag"])),
        ("record_turn", _fmt(report["record_turn"])),
        ("queue wait (turn → run started)", _fmt(report["queue_wait"])),
        ("re-run wait (pending turn → run started)", _fmt(report["rerun_wait"])),
        ("turn → judge (turn → run finished)", _fmt(report["turn_to_judge"])),
        ("runs", f"{report['runs']['total']}: {json.dumps(report['runs']['by_status'])}"),
        ("redeliveries", f"{report['redeliveries']['tasks']} tasks "
                         f"(+{report['redeliveries']['extra_deliveries']} deliveries)"),
        ("lease contention (pending)", str(report["lease_contention"])),
        ("worlds expected / stored", f"{lost['worlds_expected']} / {lost['worlds_stored']} "
                                     f"({lost['evicted_by_retention']} beyond retention)"),
        ("agents whose last turn was not consolidated", ", ".join(lost["agents_uncovered"]) or "none"),
        ("lost turns", str(lost["lost_turns"])),
        ("drained", f"{report['drained']} in {report['drain_s']} s (total {report['seconds']} s)"),
        ("ok", "[green]yes[/]" if report["ok"] else "[red]no[/]"),
    ]
    for row in rows:
        table.add_row(*row)
    if "chaos" in report:
        from rsi_worker.chaos.report import chaos_rows

        for row in chaos_rows(report["chaos"]):
            table.add_row(*row)
    return table
