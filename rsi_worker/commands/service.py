"""The service commands: ``rsi serve`` (the API and the console), ``rsi tokens create|list|revoke``
(API tokens, stored as hashes: docs/service/access.md) and ``rsi bench api``."""

from __future__ import annotations

import typer

from rsi_worker.commands.common import EXIT_SETUP, check_schema, cli_errors, echo_json, load_settings

__all__ = ["register", "serve_cmd", "tokens"]

tokens = typer.Typer(no_args_is_help=True, help="API tokens of the service (stored only as hashes).")
JSON_OPT = typer.Option(False, "--json", help="Print the result as JSON (for scripts).")
SCOPE_OPT = typer.Option(..., "--scope", help="host, viewer, operator or admin (repeatable).")


def register(app: typer.Typer) -> None:
    """Add ``serve``, ``tokens`` and ``bench api`` to ``app``."""
    from rsi_worker.commands.bench import bench

    app.command("serve")(serve_cmd)
    app.add_typer(tokens, name="tokens")
    bench.command("api")(bench_api_cmd)


def serve_cmd(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 in a container)."),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="TCP port."),
    workers: int = typer.Option(
        1, "--workers", min=1, help="uvicorn worker processes (one per pod is usual)."
    ),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
) -> None:
    """Serve the /v1 API and the web console (needs RSI_REDIS_URL and a current schema)."""
    from rsi_common.db import make_engine
    from rsi_worker.service import serve

    settings = load_settings()
    if not settings.redis_url:
        typer.echo("error: rsi serve needs RSI_REDIS_URL (the cluster's Redis)", err=True)
        raise typer.Exit(EXIT_SETUP)
    engine = make_engine(settings.database_url)
    try:
        check_schema(engine)
    finally:
        engine.dispose()
    typer.echo(
        f"rsi serve: http://{host}:{port}/console/ (API under /v1; health /healthz, /readyz)", err=True
    )
    serve(settings, host=host, port=port, workers=workers, log_level=log_level)


@tokens.command("create")
def create_cmd(
    name: str = typer.Option(..., "--name", help="Who or what holds the token (shown in the audit log)."),
    scope: list[str] = SCOPE_OPT,
    agent_prefix: str | None = typer.Option(None, "--agent-prefix", help="Only agents whose id starts so."),
    rate: int | None = typer.Option(
        None, "--rate", min=1, help="Requests per minute (default RSI_API_RATE_PER_MIN)."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """Create a token and print it once (it is stored only as a hash)."""
    from rsi_worker.commands.tokens import create_token

    with cli_errors(as_json):
        out = create_token(load_settings(), name, scope, agent_prefix, rate)
    if as_json:
        echo_json(out)
        return
    typer.echo(out["token"])
    typer.echo(
        f"token {out['id']} ({', '.join(out['scopes'])}"
        f"{', agents ' + out['agent_prefix'] + '*' if out['agent_prefix'] else ''}): "
        "shown once, store it now",
        err=True,
    )


@tokens.command("list")
def list_cmd(
    revoked: bool = typer.Option(False, "--revoked", help="Include revoked tokens."),
    as_json: bool = JSON_OPT,
) -> None:
    """List tokens (ids, names, scopes, prefixes; never the tokens)."""
    from rsi_worker.commands.tokens import list_tokens

    with cli_errors(as_json):
        rows = list_tokens(load_settings(), revoked)
    if as_json:
        echo_json(rows)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "name", "scopes", "agent prefix", "rate/min", "created", "last used", "revoked")
    for r in rows:
        table.add_row(
            r["id"],
            r["name"],
            ",".join(r["scopes"]),
            r["agent_prefix"] or "",
            str(r["rate_per_min"] or ""),
            (r["created_at"] or "")[:19],
            (r["last_used_at"] or "")[:19],
            (r["revoked_at"] or "")[:19],
        )
    Console().print(table)


@tokens.command("revoke")
def revoke_cmd(
    token_id: str = typer.Argument(..., help="The token's id (t…)."), as_json: bool = JSON_OPT
) -> None:
    """Revoke a token (every replica refuses it within 5 s)."""
    from rsi_worker.commands.tokens import revoke_token

    with cli_errors(as_json):
        out = revoke_token(load_settings(), token_id)
    if as_json:
        echo_json(out)
        return
    typer.echo(f"revoked {out['id']} ({out['name']}) at {out['revoked_at']}")


def bench_api_cmd(
    turns: int = typer.Option(2000, "--turns", min=10, help="Timed record_turn calls per path."),
    clients: int = typer.Option(8, "--clients", min=1, help="Concurrent callers (both paths)."),
    agents: int = typer.Option(50, "--agents", min=1, help="Agents the turns are spread over."),
    runs: int = typer.Option(1000, "--runs", min=1, help="Runs of the agent whose console page is timed."),
    as_json: bool = JSON_OPT,
) -> None:
    """record_turn over HTTP vs in-process at the same load (p50/p99, throughput), the console's agent
    page render time for an agent with many runs, and harness-event delivery to a remote client."""
    import json

    from rsi_worker.bench.api import bench_api

    report = bench_api(n_turns=turns, clients=clients, n_agents=agents, n_runs=runs)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rsi bench api", show_lines=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("target")
    for metric, value, target in report["summary"]:
        table.add_row(metric, str(value), target)
    Console().print(table)
