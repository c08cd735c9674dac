"""``rsi bench efficacy``: does consolidation learn what users ask for, and only that (issue 12)?

A seeded pool of simulated agents (:mod:`rsi_worker.bench.efficacy_pool`) is run at each noise level
on its own in-process platform (:mod:`rsi_worker.bench.efficacy_platform`): each agent has a few
live turns under its current harness, the simulated user corrects an answer that lacks one of its
preferences in the next message (or thanks it), and consolidation runs after every stored turn.
Then held-out requests, never recorded, are answered under H0 and under every version the agent
adopted and judged for the agent's preferences. The arithmetic is in
:mod:`rsi_worker.bench.efficacy_metrics`; the false-positive run of no-op candidates in
:mod:`rsi_worker.bench.efficacy_noop`. Everything is described in docs/benchmarks/efficacy.md.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsi_common.db import replay_rows, runs
from rsi_worker.bench.efficacy_metrics import (
    H0,
    AdoptionRecord,
    AgentHistory,
    is_noop,
    level_summary,
    usage_tokens,
)
from rsi_worker.bench.efficacy_platform import Platform, has_trait, version_key
from rsi_worker.bench.efficacy_pool import AgentSpec, build_pool
from rsi_worker.consolidate import ConsolidationResult

__all__ = ["REQUIRED", "EfficacyBench", "bench_efficacy", "drive", "history", "levels", "noise_label",
           "report_table", "run_agents", "run_stats", "targets"]

REQUIRED = ("heldout_h0", "heldout_final", "adoptions", "false_adoptions", "harmful_adoptions",
            "tokens_per_adoption")
"""The keys every noise level of the JSON report carries (issue 12)."""
GAIN_TARGETS: Mapping[float, float] = {0.0: 0.8, 0.25: 0.5}
"""Held-out gain (final − H0) targets by noise level (issue 12); other levels have none."""
NOOP_TARGET = 0.01


@dataclass(frozen=True)
class EfficacyBench:
    """Knobs of the benchmark (defaults: ``rsi bench efficacy``)."""

    agents: int = 30
    """Agents per noise level (the same pool at every level)."""
    noise: tuple[float, ...] = (0.0, 0.1, 0.25)
    seed: int = 0
    heldout: int = 5
    """Held-out requests per agent."""
    noop_runs: int = 200
    """Consolidations of the false-positive run (0: skip it)."""
    noop_noise: float = 0.25
    jobs: int = 1
    """Worker processes (each runs a share of every level's agents and of the no-op runs in its own
    database; the figures do not depend on it)."""
    home: Path | None = None
    """Where the SQLite files go (default: a temporary directory, removed afterwards)."""


def noise_label(noise: float) -> str:
    """The JSON key of a noise level (``0``, ``0.1``, ``0.25``)."""
    return f"{noise:g}"


# --- one agent ------------------------------------------------------------------------------------


def _reply(spec: AgentSpec, turn: int, request: str, answer: str, repeated: str | None) -> tuple[str, bool]:
    """The user's next message after ``answer`` and whether it is a correction."""
    if spec.kind == "accept":
        return spec.acceptance(turn), False
    if spec.kind == "repeat" and repeated is not None:
        return repeated, True
    missing = [t for t in spec.wants(turn) if not has_trait(request, answer, t)]
    if missing:
        return spec.correction(missing, turn), True
    return spec.acceptance(turn), False


def drive(platform: Platform, spec: AgentSpec) -> list[ConsolidationResult]:
    """The agent's live turns, each followed by the user's reply; consolidation after every turn.

    Returns:
        Every run result, in order.
    """
    results: list[ConsolidationResult] = []
    repeated: str | None = None
    for turn, request in enumerate(spec.live):
        conv = f"c{turn}"
        first = platform.say(spec.id, conv, request)
        results += platform.consolidate(spec.id, first)
        reply, corrects = _reply(spec, turn, request, first.answer, repeated)
        if corrects and repeated is None:
            repeated = reply
        results += platform.consolidate(spec.id, platform.say(spec.id, conv, reply))
    return results


def _heldout(platform: Platform, spec: AgentSpec, version: str) -> tuple[dict[str, list[bool]], list[str]]:
    harness = platform.harness(spec.id, None if version == H0 else version)
    answers = [platform.answer(spec.id, harness, text, i) for i, text in enumerate(spec.heldout)]
    by_trait = {t: [has_trait(text, a, t) for text, a in zip(spec.heldout, answers, strict=True)]
                for t in spec.traits}
    return by_trait, answers


def history(platform: Platform, spec: AgentSpec, results: Sequence[ConsolidationResult]) -> AgentHistory:
    """The agent's adoptions (with the no-op test of each diff) and held-out results per version."""
    adoptions: list[AdoptionRecord] = []
    for r in results:
        if r.status != "adopted" or r.version is None:
            continue
        parent, child = version_key(r.start_version), version_key(r.version)
        noop = is_noop(platform.surface(platform.harness(spec.id, r.start_version)),
                       platform.surface(platform.harness(spec.id, r.version)))
        adoptions.append(AdoptionRecord(str(r.run_id), parent, child, noop))
    final = version_key(platform.version(spec.id))
    heldout: dict[str, dict[str, list[bool]]] = {}
    answers: dict[str, list[str]] = {}
    for v in dict.fromkeys([H0, *(a.child for a in adoptions), final]):
        heldout[v], answers[v] = _heldout(platform, spec, v)
    return AgentHistory(spec.id, spec.kind, spec.traits, tuple(adoptions), heldout, final, answers)


# --- one noise level ------------------------------------------------------------------------------


def run_stats(platform: Platform, agents: Sequence[str]) -> dict[str, Any]:
    """Runs, rounds, statuses and tokens of the agents' run records and replay rows."""
    out: dict[str, Any] = {"runs": 0, "rounds": 0, "statuses": {}, "role_tokens": 0, "replay_tokens": 0}
    with platform.sessions() as s:
        for agent in agents:
            for run in runs(s, agent, 100_000):
                out["runs"] += 1
                out["statuses"][run.status] = out["statuses"].get(run.status, 0) + 1
                result = dict(run.result or {})
                if (result.get("round") or {}).get("candidates"):
                    out["rounds"] += 1
                out["role_tokens"] += usage_tokens(result.get("usage"))
                out["replay_tokens"] += sum(int(row.tokens or 0) for row in replay_rows(s, run.id))
        s.commit()
    return out


def _merge_stats(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": 0, "rounds": 0, "statuses": {}, "role_tokens": 0, "replay_tokens": 0}
    for part in parts:
        for key in ("runs", "rounds", "role_tokens", "replay_tokens"):
            out[key] += int(part[key])
        for name, count in part["statuses"].items():
            out["statuses"][name] = out["statuses"].get(name, 0) + int(count)
    return out


def run_agents(home: Path, noise: float, pool: Sequence[AgentSpec], seed: int
               ) -> tuple[list[AgentHistory], dict[str, Any]]:
    """Agents of one noise level on a fresh platform in ``home``: their histories and run statistics.
    An agent's results do not depend on the other agents of the platform."""
    platform = Platform(home, noise, seed)
    try:
        histories = [history(platform, spec, drive(platform, spec)) for spec in pool]
        return histories, run_stats(platform, [spec.id for spec in pool])
    finally:
        platform.close()


def _chunks(items: Sequence[Any], n: int) -> list[list[Any]]:
    """``items`` dealt round-robin into at most ``n`` non-empty lists."""
    return [c for c in ([list(items[i::n]) for i in range(max(1, n))]) if c]


@dataclass(frozen=True)
class _Task:
    kind: str
    """``level`` (agents of a noise level) or ``noop`` (no-op consolidations)."""
    home: Path
    noise: float
    seed: int
    items: tuple[Any, ...]


def _run(task: _Task) -> tuple[_Task, Any, float]:
    from rsi_worker.bench.efficacy_noop import noop_runs

    t0 = time.process_time()
    if task.kind == "level":
        out: Any = run_agents(task.home, task.noise, task.items, task.seed)
    else:
        out = noop_runs(task.home, task.items, task.noise, task.seed)
    return task, out, time.process_time() - t0


def _tasks(cfg: EfficacyBench, home: Path, pool: Sequence[AgentSpec]) -> list[_Task]:
    jobs = max(1, cfg.jobs)
    tasks = [_Task("level", home / f"noise-{noise_label(noise)}-{i}", noise, cfg.seed, tuple(chunk))
             for noise in cfg.noise for i, chunk in enumerate(_chunks(pool, jobs))]
    tasks += [_Task("noop", home / f"noop-{i}", cfg.noop_noise, cfg.seed, tuple(chunk))
              for i, chunk in enumerate(_chunks(range(cfg.noop_runs), jobs))]
    return tasks


def _top_up(cfg: EfficacyBench, home: Path, parts: Sequence[Mapping[str, Any]]
            ) -> list[tuple[_Task, Any, float]]:
    """More no-op runs (the next indices) until ``cfg.noop_runs`` reached the no-op round, or twice
    as many were tried; the indices tried never depend on ``jobs``."""
    out: list[tuple[_Task, Any, float]] = []
    tried, reached = cfg.noop_runs, sum(int(p["runs"]) for p in parts)
    while 0 < reached < cfg.noop_runs and tried < 2 * cfg.noop_runs:
        batch = range(tried, min(tried + cfg.noop_runs - reached, 2 * cfg.noop_runs))
        tasks = [_Task("noop", home / f"noop-{tried}-{i}", cfg.noop_noise, cfg.seed, tuple(chunk))
                 for i, chunk in enumerate(_chunks(batch, max(1, cfg.jobs)))]
        more = _execute(tasks, cfg.jobs)
        out += more
        tried, reached = batch.stop, reached + sum(int(o["runs"]) for _, o, _ in more)
    return out


def _execute(tasks: Sequence[_Task], jobs: int) -> list[tuple[_Task, Any, float]]:
    """Run ``tasks`` in this process (``jobs`` 1) or in ``jobs`` spawned processes."""
    if jobs <= 1 or len(tasks) <= 1:
        return [_run(t) for t in tasks]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_run, tasks))


def bench_efficacy(cfg: EfficacyBench | None = None) -> dict[str, Any]:
    """Run every noise level and the false-positive run; returns the JSON report.

    Returns:
        ``{"<noise>": {<REQUIRED keys>, ...}, ..., "noop_adoption_rate", "noop_runs",
        "noop_adoptions", "noop", "config", "targets", "seconds"}``; the noise levels are the keys
        that parse as numbers.
    """
    from rsi_worker.bench.efficacy_noop import merge

    cfg = cfg or EfficacyBench()
    t0 = time.monotonic()
    pool = build_pool(cfg.agents, cfg.seed, heldout=cfg.heldout)
    report: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        home = cfg.home or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rsi-efficacy-")))
        done = _execute(_tasks(cfg, home, pool), cfg.jobs)
        done += _top_up(cfg, home, [out for task, out, _ in done if task.kind == "noop"])
    order = {spec.id: i for i, spec in enumerate(pool)}
    for noise in cfg.noise:
        mine = [(out, s) for task, out, s in done if task.kind == "level" and task.noise == noise]
        histories = sorted((h for out, _ in mine for h in out[0]), key=lambda h: order[h.agent])
        level = level_summary(histories, _merge_stats([out[1] for out, _ in mine]))
        level.update(noise=noise, cpu_seconds=round(sum(s for _, s in mine), 1))
        report[noise_label(noise)] = level
    if cfg.noop_runs > 0:
        parts = [(out, s) for task, out, s in done if task.kind == "noop"]
        noop = merge([out for out, _ in parts], cfg.noop_noise)
        noop["cpu_seconds"] = round(sum(s for _, s in parts), 1)
        report.update(noop_adoption_rate=noop["adoption_rate"], noop_runs=noop["runs"],
                      noop_adoptions=noop["adoptions"], noop=noop)
    report["config"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.__dict__.items()
                        if k != "home"}
    report["targets"] = targets(report)
    report["seconds"] = round(time.monotonic() - t0, 1)
    return report


def levels(report: Mapping[str, Any]) -> list[str]:
    """The noise-level keys of a report, in order."""
    out = []
    for key in report:
        try:
            float(key)
        except ValueError:
            continue
        out.append(key)
    return out


def targets(report: Mapping[str, Any]) -> dict[str, bool]:
    """Each issue-12 target → met (a level without a target for a figure has no entry)."""
    out: dict[str, bool] = {}
    for key in levels(report):
        level = report[key]
        out[f"{key}: false_adoptions == 0"] = level["false_adoptions"] == 0
        out[f"{key}: harmful_adoptions == 0"] = level["harmful_adoptions"] == 0
        want = GAIN_TARGETS.get(float(key))
        if want is not None:
            out[f"{key}: heldout gain >= {want:g}"] = (level["heldout_gain"] or 0.0) >= want
    if "noop_adoption_rate" in report:
        out[f"noop adoption rate <= {NOOP_TARGET:.0%}"] = (report["noop_adoption_rate"] or 0.0) <= NOOP_TARGET
    return out


def _mark(ok: bool) -> str:
    return "[green]met[/]" if ok else "[red]missed[/]"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def _cells(key: str, v: Mapping[str, Any]) -> dict[str, str]:
    """One noise level's column of :func:`report_table`."""
    want = GAIN_TARGETS.get(float(key))
    gain = "—" if v["heldout_gain"] is None else f"{v['heldout_gain']:+.2f}"
    if want is not None:
        gain += " " + _mark((v["heldout_gain"] or 0.0) >= want)
    tpa = v["tokens_per_adoption"]
    return {
        "held-out pass, H0": _pct(v["heldout_h0"]),
        "held-out pass, final": _pct(v["heldout_final"]),
        "held-out gain (final − H0)": gain,
        "adoptions": str(v["adoptions"]),
        "false adoptions": f"{v['false_adoptions']} {_mark(v['false_adoptions'] == 0)}",
        "  of them no-op diffs": str(v["noop_adoptions"]),
        "harmful adoptions": f"{v['harmful_adoptions']} {_mark(v['harmful_adoptions'] == 0)}",
        "adoptions changing no held-out answer": str(v["unchanged_heldout_adoptions"]),
        "tokens per adoption": "—" if tpa is None else f"{tpa:,.0f}",
        "agents / learning / held-out turns":
            f"{v['agents']} / {v['learning_agents']} / {v['heldout_turns']}",
        "runs / rounds": f"{v['runs']} / {v['rounds']}",
        "cpu seconds": str(v["cpu_seconds"]),
    }


TARGET_TEXT: Mapping[str, str] = {
    "held-out gain (final − H0)": ", ".join(f"≥ {v:g} at noise {k:g}" for k, v in GAIN_TARGETS.items()),
    "false adoptions": "0",
    "harmful adoptions": "0",
}


def report_table(report: Mapping[str, Any]) -> Any:
    """The report as a rich table: one column per noise level, each figure beside its target."""
    from rich.table import Table

    keys = levels(report)
    cfg = report["config"]
    table = Table(title=f"rsi bench efficacy — {cfg['agents']} agents per level, seed {cfg['seed']}, "
                        f"{cfg['heldout']} held-out requests each, {report['seconds']} s")
    table.add_column("figure")
    for key in keys:
        table.add_column(f"noise {key}", justify="right")
    table.add_column("target")
    columns = [_cells(key, report[key]) for key in keys]
    for label in columns[0] if columns else {}:
        table.add_row(label, *(c[label] for c in columns), TARGET_TEXT.get(label, ""))
    if "noop_adoption_rate" in report:
        rate, noop = report["noop_adoption_rate"], report["noop"]
        text = (f"{_pct(rate)} of {report['noop_runs']} runs (noise {noop['noise']:g}) "
                f"{_mark(rate is not None and rate <= NOOP_TARGET)}")
        table.add_row("no-op candidates adopted", text, *([""] * (len(keys) - 1)), f"≤ {NOOP_TARGET:.0%}")
    return table
