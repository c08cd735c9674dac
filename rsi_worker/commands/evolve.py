"""``rsi suite`` and ``rsi evolve``: offline RRSI evolve on task suites (docs/algorithm/evolve.md).

``rsi suite build NAME (--tasks FILE.jsonl | --from-agent A) [--heldout ID]... [--heldout-fraction F]
[--seed S] [--system TEXT]`` validates and stores a suite; ``rsi suite show NAME``.
``rsi evolve init NAME --suite S [--config FILE.json]``, ``run NAME --inline [--rounds N] [--dir D]``
(a ``STOP`` file in ``D`` ends the run after the current round), ``status``, ``export NAME DIR``,
``stop``, ``readjudicate NAME --t N [--delta X] [--weight K=V]...``, ``reevaluate NAME --t N``,
``promote NAME --agent A``. Exit codes are those of :mod:`rsi_worker.commands.common`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from rsi_worker.commands.common import check_schema, cli_errors, echo_json, fail, load_settings

if TYPE_CHECKING:
    from rsi_worker.evolve.engine import EvolveEnv, RunOutcome
    from rsi_worker.runtime import Runtime

__all__ = ["evolve", "register", "suite"]

suite = typer.Typer(no_args_is_help=True, help="Task suites for offline evolve.")
evolve = typer.Typer(no_args_is_help=True, help="Offline RRSI evolve runs on task suites.")
JSON_OPT = typer.Option(False, "--json", help="Print the result as JSON.")
MAX_FILE_BYTES = 64 * 1024 * 1024
TASKS_OPT = typer.Option(None, "--tasks", help="A JSONL file: one task object per line.")
HELDOUT_OPT = typer.Option(None, "--heldout", help="A held-out task id (repeatable).")
CONFIG_OPT = typer.Option(None, "--config", help="EvolveConfig JSON (missing keys: defaults).")
DIR_OPT = typer.Option(None, "--dir", help="Directory watched for a STOP file (default runs/NAME).")
OUT_ARG = typer.Argument(..., help="Directory the files are written to.")
WEIGHT_OPT = typer.Option(None, "--weight", help="beta0|beta1|w_s|w_c|w_n=VALUE (repeatable).")


def register(app: typer.Typer) -> None:
    """Add ``rsi suite`` and ``rsi evolve`` to ``app``."""
    app.add_typer(suite, name="suite")
    app.add_typer(evolve, name="evolve")


@contextlib.contextmanager
def _runtime(*, models: bool = False) -> Iterator[tuple[Runtime, EvolveEnv]]:
    import rsi_worker.roles  # noqa: F401 - registers the sim's role behaviours
    from rsi_worker.cluster.worker import load_model_factory
    from rsi_worker.evolve.engine import EvolveEnv
    from rsi_worker.runtime import open_runtime

    settings = load_settings()
    rt = open_runtime(settings, models=load_model_factory(settings) if models else None)
    try:
        check_schema(rt.engine)
        yield rt, EvolveEnv(rt.sessions, rt.deps.models, settings)
    finally:
        rt.close()


def _read(path: Path, as_json: bool) -> str:
    """A regular file's text (UTF-8, at most ``MAX_FILE_BYTES``): a directory, a FIFO or a device is refused
    before it is read, and at most one byte over the limit is ever read (a file may grow meanwhile)."""
    import stat

    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            fail(f"{path}: not a regular file", as_json=as_json)
        if info.st_size > MAX_FILE_BYTES:
            fail(f"{path}: {info.st_size} bytes, over the limit of {MAX_FILE_BYTES}", as_json=as_json)
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        fail(f"{path}: cannot read ({type(exc).__name__})", as_json=as_json)
    if len(data) > MAX_FILE_BYTES:
        fail(f"{path}: over the limit of {MAX_FILE_BYTES} bytes", as_json=as_json)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{path}: not valid UTF-8 (byte {exc.start + 1})", as_json=as_json)


@suite.command("build")
def suite_build(
    name: str = typer.Argument(..., help="The suite's name."),
    tasks: Path | None = TASKS_OPT,
    from_agent: str | None = typer.Option(
        None, "--from-agent", help="Build from this agent's recorded worlds."
    ),
    agent: str | None = typer.Option(None, "--agent", help="The agent whose worlds world-backed tasks name."),
    heldout: list[str] | None = HELDOUT_OPT,
    heldout_fraction: float | None = typer.Option(None, "--heldout-fraction", help="Hold out this share."),
    seed: int = typer.Option(7, "--seed", help="Seed of the held-out split."),
    system: str | None = typer.Option(None, "--system", help="System prompt of request-backed tasks."),
    replace: bool = typer.Option(False, "--replace", help="Replace a stored suite of that name."),
    as_json: bool = JSON_OPT,
) -> None:
    """Validate and store a task suite."""
    from rsi_common.boundary import check_id
    from rsi_common.db import WorldRow
    from rsi_common.errors import InvalidInput
    from rsi_worker.consolidate.signals import checks_for
    from rsi_worker.evolve.store import Store
    from rsi_worker.evolve.suite import from_jsonl, from_worlds

    with cli_errors(as_json), _runtime() as (rt, _):
        if (tasks is None) == (from_agent is None):
            raise InvalidInput("give exactly one of --tasks FILE and --from-agent A")
        import sqlalchemy as sa

        if tasks is not None:
            owner = agent

            def exists(world_id: str) -> bool:
                with rt.sessions() as s:
                    row = s.get(WorldRow, world_id)
                    return row is not None and row.agent_id == owner

            built = from_jsonl(
                name,
                _read(tasks, as_json).splitlines(),
                system=system,
                agent=agent,
                heldout=heldout or (),
                heldout_fraction=heldout_fraction,
                seed=seed,
                world_exists=exists,
            )
        else:
            assert from_agent is not None
            check_id(from_agent, "--from-agent")  # before the query: one refusal on both databases
            with rt.sessions() as s:
                rows = (
                    s.execute(
                        sa.select(WorldRow)
                        .where(WorldRow.agent_id == from_agent)
                        .order_by(WorldRow.clock, WorldRow.id)
                    )
                    .scalars()
                    .all()
                )
                pairs = [
                    (
                        r.id,
                        checks_for(
                            r.signals or {},
                            str(((r.world or {}).get("outcome") or {}).get("final_text") or ""),
                        ),
                    )
                    for r in rows
                ]
            built = from_worlds(name, from_agent, pairs, heldout_fraction=heldout_fraction or 0.0, seed=seed)
        Store(rt.sessions).save_suite(built, replace=replace)
    info = {
        "name": built.name,
        "tasks": len(built.tasks),
        "heldout": len(built.heldout),
        "agent": built.agent,
    }
    if as_json:
        echo_json(info)
    else:
        typer.echo(f"suite {built.name}: {len(built.tasks)} tasks, {len(built.heldout)} held out")


@suite.command("show")
def suite_show(name: str = typer.Argument(...), as_json: bool = JSON_OPT) -> None:
    """Print a stored suite."""
    from rsi_worker.evolve.store import Store

    with cli_errors(as_json), _runtime() as (rt, _):
        s = Store(rt.sessions).suite(name)
    if as_json:
        echo_json(s.to_json())
        return
    typer.echo(f"suite {s.name}: {len(s.tasks)} tasks ({len(s.heldout)} held out), agent {s.agent or '-'}")
    for t in s.tasks:
        where = f"world {t.world_id}" if t.world_id else "request " + json.dumps((t.request or "")[:60])
        mark = " [held out]" if t.id in s.heldout else ""
        typer.echo(f"  {t.id}: {where}, {len(t.checks)} checks{mark}")


@evolve.command("init")
def evolve_init(
    name: str = typer.Argument(...),
    suite_name: str = typer.Option(..., "--suite", help="A stored suite."),
    config: Path | None = CONFIG_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Create an evolve run on a suite."""
    from rsi_common.boundary import check_id, parse_json
    from rsi_common.errors import InvalidInput
    from rsi_worker.evolve.config import EvolveConfig

    with cli_errors(as_json), _runtime() as (_, env):
        check_id(name, "name", max_chars=64, error=InvalidInput)  # type: ignore[arg-type]
        if config is not None:
            cfg = EvolveConfig.from_json(parse_json(_read(config, as_json), str(config),
                                                    max_bytes=MAX_FILE_BYTES))
        else:
            cfg = EvolveConfig()
        env.store.create(name, suite_name, cfg)
    if as_json:
        echo_json({"name": name, "suite": suite_name, "config": cfg.to_json()})
    else:
        typer.echo(f"evolve run {name} on suite {suite_name}: T={cfg.params.T}, mode {cfg.mode}")


@evolve.command("run")
def evolve_run(
    name: str = typer.Argument(...),
    inline: bool = typer.Option(False, "--inline", help="Run in this process."),
    wait: bool = typer.Option(False, "--wait", help="On the cluster: wait until the run ends."),
    rounds: int | None = typer.Option(None, "--rounds", min=1, help="Run at most this many rounds now."),
    run_dir: Path | None = DIR_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Run (or resume) an evolve run: on the cluster (``RSI_REDIS_URL``) or in this process (``--inline``)."""
    from rsi_worker.evolve.engine import run_inline

    with cli_errors(as_json), _runtime(models=inline) as (rt, env):
        if inline:
            env.stop_file = (run_dir or Path("runs") / name) / "STOP"
            _unwatch(rt, name)
            out = run_inline(env, name, max_rounds=rounds)
        else:
            out = _launch(rt, env, name, wait, quiet=as_json)
    if as_json:
        echo_json(out)
    else:
        why = f" — {out.reason}" if out.reason else ""
        typer.echo(f"evolve run {name}: {out.status} at t={out.t} ({out.rounds_run} rounds now){why}")
    if out.status == "failed":
        raise typer.Exit(1)


def _launch(rt: Runtime, env: EvolveEnv, name: str, wait: bool, *, quiet: bool = False) -> RunOutcome:
    """Enqueue the run's first ``evolve_step`` on the cluster; with ``wait``, poll its status in SQL."""

    from rsi_common.dispatch import KombuDispatcher
    from rsi_common.errors import SettingsError
    from rsi_worker.cluster.evolve_watch import launch
    from rsi_worker.evolve.engine import RunOutcome

    if not rt.settings.redis_url:
        raise SettingsError("the cluster needs RSI_REDIS_URL; or pass --inline")
    _, _, status, _, state = env.store.run(name)
    if status == "done":
        return RunOutcome("done", int((state or {}).get("t", 0)), 0, "already done")
    env.store.set_run(name, status="running", stop_requested=False)
    if launch(rt.coord, KombuDispatcher(str(rt.settings.redis_url)), name) is None:
        typer.echo(f"evolve run {name}: a chain of it runs on the cluster; not launched again", err=True)
    if wait:
        return _wait(env, name, quiet=quiet)
    return RunOutcome(
        "running", int((state or {}).get("t", 0)), 0, "launched on the cluster; see rsi evolve status"
    )


def _wait(env: EvolveEnv, name: str, *, quiet: bool) -> RunOutcome:
    """Follow the run in SQL until it ends: a bar of its rounds, counted adopted / kept."""
    from rsi_worker.commands.jobview import JobProgress, poll_until
    from rsi_worker.evolve.engine import RunOutcome

    _, config, _, _, state = env.store.run(name)
    start = int((state or {}).get("t", 0))
    seen = [start]
    with JobProgress.show("evolve", name, config.params.T, quiet=quiet) as progress:
        if seen[0]:
            progress.advance("earlier", seen[0])

        def read() -> RunOutcome | None:
            _, _, status, _, state = env.store.run(name)
            t = int((state or {}).get("t", 0))
            for done in range(seen[0], t):
                decision = (env.store.round(name, done) or {}).get("decision") or {}
                progress.advance("adopted" if decision.get("winner") else "kept")
            seen[0] = max(seen[0], t)
            return None if status == "running" else RunOutcome(status, t, t - start)

        return poll_until(read)


def _unwatch(rt: Runtime, name: str) -> None:
    """An inline run leaves the sweeper's watch; a chain of it on the cluster stops at its next task."""
    from rsi_common.handoff import COORD_ERRORS
    from rsi_worker.cluster.evolve_watch import unwatch

    if not rt.settings.redis_url:
        return
    try:
        unwatch(rt.coord, name)
    except COORD_ERRORS:
        typer.echo("Redis unavailable: the run stays on the sweeper's watch of the cluster", err=True)


@evolve.command("status")
def evolve_status(name: str = typer.Argument(...), as_json: bool = JSON_OPT) -> None:
    """Live progress of a run."""
    from rsi_worker.evolve.engine import status_of

    with cli_errors(as_json), _runtime() as (_, env):
        st = status_of(env.store, name)
    if as_json:
        echo_json(st)
        return
    typer.echo(
        f"{name}: {st['status']} round {st['t']}/{st['T']}, S* {st['S_star']}, delta {st['delta']}, "
        f"adopted {st['adopted']}, trials this round {st['round_trials']}"
    )


@evolve.command("export")
def evolve_export(name: str = typer.Argument(...), out: Path = OUT_ARG, as_json: bool = JSON_OPT) -> None:
    """Write history.jsonl, frontier.json, calibration.json, directives.json, decisions.json, trials.jsonl."""
    from rsi_worker.evolve.ops import export_run

    with cli_errors(as_json), _runtime() as (_, env):
        paths = export_run(env.store, name, out)
    if as_json:
        echo_json([str(p) for p in paths])
    else:
        typer.echo("\n".join(map(str, paths)))


@evolve.command("stop")
def evolve_stop(name: str = typer.Argument(...), as_json: bool = JSON_OPT) -> None:
    """End the run after its current round."""
    from rsi_worker.evolve.ops import request_stop

    with cli_errors(as_json), _runtime() as (_, env):
        request_stop(env.store, name)
    typer.echo(json.dumps({"name": name, "stop_requested": True}) if as_json else f"{name}: stop requested")


def _weights(items: list[str] | None) -> dict[str, float]:
    from rsi_common.errors import InvalidInput

    out: dict[str, float] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise InvalidInput(f"--weight {item[:40]!r}: expected NAME=NUMBER")
    return out


def _rejudge(
    name: str, t: int, delta: float | None, weight: list[str] | None, as_json: bool, full: bool
) -> None:
    from rsi_worker.evolve.judgement import NeedsReevaluation
    from rsi_worker.evolve.ops import readjudicate_round, reevaluate_round

    record: dict[str, Any] = {}
    with cli_errors(as_json), _runtime(models=full) as (_, env):
        fn = reevaluate_round if full else readjudicate_round
        try:
            record = fn(env, name, t, delta=delta, weights=_weights(weight))
        except NeedsReevaluation as exc:
            fail(str(exc), as_json=as_json, kind="NeedsReevaluation")
    if as_json:
        echo_json(record)
    else:
        typer.echo(f"{name} round {t}: winner {record.get('winner') or 'none'} (delta {record.get('delta')})")


@evolve.command("readjudicate")
def evolve_readjudicate(
    name: str = typer.Argument(...),
    t: int = typer.Option(..., "--t", help="The round (the last judged one)."),
    delta: float | None = typer.Option(None, "--delta", help="Another noise band."),
    weight: list[str] | None = WEIGHT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Re-apply Algorithm 2 to round t's stored inputs."""
    _rejudge(name, t, delta, weight, as_json, full=False)


@evolve.command("reevaluate")
def evolve_reevaluate(
    name: str = typer.Argument(...),
    t: int = typer.Option(..., "--t"),
    delta: float | None = typer.Option(None, "--delta"),
    weight: list[str] | None = WEIGHT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Measure round t's early-stopped candidates in full and judge again."""
    _rejudge(name, t, delta, weight, as_json, full=True)


@evolve.command("promote")
def evolve_promote(
    name: str = typer.Argument(...),
    agent: str = typer.Option(..., "--agent", help="The agent whose current version the frontier becomes."),
    as_json: bool = JSON_OPT,
) -> None:
    """Make the run's frontier harness an agent's current version (fenced write, lineage, as an adoption)."""
    from rsi_common.dispatch import KombuDispatcher
    from rsi_worker.evolve.ops import promote

    with cli_errors(as_json), _runtime() as (rt, env):
        dispatcher = KombuDispatcher(str(rt.settings.redis_url) if rt.settings.redis_url else "memory://")
        info = promote(env, rt.coord, name, agent, dispatcher=dispatcher)
    if as_json:
        echo_json(info)
    else:
        typer.echo(f"{agent}: {info['version']} current (promoted from evolve run {name})")
