"""``rsi bench consolidate``: one consolidation's wall time against its own critical path (issue 7).

Setup: a private cluster (:class:`~rsi_worker.local.embedded.EmbeddedCluster`: a private redis-server,
SQLite, ``workers`` real ``rsi worker`` processes × ``concurrency`` threads), the sim model at
``latency_ms`` per call, the defaults W = ``n_eval`` = 8, k = 2, m = 2 and the benchmark model factory
(:mod:`rsi_worker.bench.models`). Every agent is seeded with the same eight scored worlds, recorded
live under H0 with the sim model (latency 0): four accepted answers (``stars`` 5) and four answers
the user corrected in the next message (:data:`~rsi_worker.jobs.scenario.CORRECTION`; the correction
turns themselves carry no signal). The run is triggered for the newest correction the way a host
does (``try_begin`` + a ``consolidate`` message).

Measured from the stored run (never from timing asserts in tests):

1. **Wall**: ``started_at → finished_at`` of the run row, and trigger → ``finished_at`` (includes the
   wait of the ``consolidate`` message in its queue).
2. **Critical path** of the run's own call graph, in model calls × ``latency_ms``::

       CP = signal                         (implicit-signal reader calls per pair: the pairs are read
                                            concurrently, so ceil(calls / pairs), run context)
          + max over incumbent trials   (policy calls + judge calls)
          + analyst                        (run context)
          + max over candidates c of (draft_c + max over c's trials)
                                           (a draft's proposer + critic calls, its usage; a candidate's
                                            trials start as soon as its own draft passed)

   A trial's policy calls are the ``steps`` of its replay (0 for a ``recorded``/``cached`` trial, which
   reuses an answer); its judge calls come from the row's usage. The phases of one run are strictly
   sequential (open → incumbent chord → analysis → draft-and-trials chord → judge), so no schedule
   on any number of threads beats CP. The **capacity bound** additionally charges the incumbent
   fan-out ``max(its longest trial, Σ its calls / threads)`` and the draft-and-trials fan-out
   :func:`released_bound` (a candidate's trials start no sooner than its own draft ends) — the bound
   for the cluster's ``workers × concurrency`` threads; reported beside CP (``capacity_over_cp``),
   since with more trials than threads no schedule reaches CP.
3. ``wall / CP`` (target ≤ 1.15) and ``wall / capacity bound``.
4. The same consolidation in one process (``consolidate_inline`` with a ``ThreadExecutor`` of the
   cluster's total threads, ``workers × concurrency``) on an identically seeded agent, and
   ``distributed / single``.
5. Early stop with variant B made hopeless (its harness makes the policy refuse), on the hopeless
   scenario's worlds (6 accepted + 2 corrected) and on the standard mix (4 + 4): the candidate-replay
   policy calls (``steps`` of the stored candidate rows) with early stop on (on the cluster) and off
   (in-process — with early stop off every slot runs to completion, so the count does not depend on
   the schedule), the saving, and its ceiling: the saving if B ran only the failed trials the exact
   bound needs (:func:`failures_to_stop`), with the saving in % of it.
6. A no-signal run's ``consolidate`` task time (:mod:`rsi_worker.bench.nosignal`), for a new
   conversation's turn and for a follow-up turn (which the implicit-signal reader reads).
7. Celery's cost per hop on the same workers (:mod:`rsi_worker.bench.hops`): the round trip of a
   no-op task.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from rsi_common.config import Settings
from rsi_common.db import get_run, runs, save_world
from rsi_common.db import replay_rows as stored_rows
from rsi_common.dispatch import KombuDispatcher
from rsi_common.handoff import trigger_consolidation
from rsi_common.llm import make_client
from rsi_worker.bench.models import HOPELESS_MODEL
from rsi_worker.consolidate import ThreadExecutor, consolidate_inline
from rsi_worker.consolidate import fields as f
from rsi_worker.consolidate.evaluate import INCUMBENT
from rsi_worker.consolidate.trials import row_json
from rsi_worker.jobs.scenario import CORRECTION, conversation_turn, next_history
from rsi_worker.runtime import Runtime, open_runtime

__all__ = ["ConsolidateBench", "bench_consolidate", "critical_path", "released_bound", "seed_agent"]

FACTORY = "rsi_worker.bench.models:bench_models"
TOPICS = ("laptops", "phones", "headphones", "monitors", "tablets", "cameras", "laptops", "phones")
CLOSED = ("recorded", "kept", "adopted", "failed", "skipped", "interrupted")


@dataclass(frozen=True)
class ConsolidateBench:
    """Knobs of the benchmark (defaults = the issue's setup)."""

    latency_ms: float = 200.0
    """Sim latency per model call, in milliseconds."""
    workers: int = 2
    concurrency: int = 8
    inline_threads: int | None = None
    """Thread pool of the single-process comparison; ``None``: ``workers × concurrency``, the
    cluster's total threads (the comparison is like with like)."""
    accepted: int = 4
    corrected: int = 4
    """Accepted and corrected worlds per agent (W = their sum, cut to ``n_eval``)."""
    hopeless_accepted: int = 6
    hopeless_corrected: int = 2
    """Worlds of the hopeless-candidate scenario (the mix of the cluster test of early stop); the
    early stop is also measured on the standard mix (``accepted`` + ``corrected``)."""
    no_signal_runs: int = 200
    timeout_s: float = 300.0
    home: Path | None = None
    """Cluster home (default: a temporary directory, removed afterwards)."""


# --- scenario -------------------------------------------------------------------------------------


def seed_agent(sessions: sessionmaker[Session], settings: Settings, agent: str, *, model: str = "sim-1",
               accepted: int = 4, corrected: int = 4, clock0: float = 1_700_000_000.0) -> str:
    """Record the benchmark's worlds for ``agent`` (live sim turns at latency 0 under H0).

    Returns:
        The io id of the newest turn (the last correction), the run's trigger.
    """
    quick = settings.model_copy(update={"sim": settings.sim.model_copy(update={"latency_ms": 0.0})})
    policy = make_client("sim", model, quick, role="policy")
    clock = itertools.count(clock0, 60.0)
    last = ""

    def say(conv: str, n: int, text: str, history: list[dict[str, Any]], signals: dict[str, Any]) -> Any:
        nonlocal last
        turn = conversation_turn(policy, None, agent, conv, n, text, history, model=model, clock=next(clock))
        assert turn.world is not None
        with sessions() as s:
            save_world(s, agent, turn.world, signals, retention=settings.world_retention, enqueued=True)
            s.commit()
        last = str(turn.world["io_id"])
        return turn

    for i in range(accepted):
        topic = TOPICS[i % len(TOPICS)]
        say(f"ok{i}", 1, f"Compare {topic}: use search query={topic}", [], {"stars": 5})
    for i in range(corrected):
        topic = TOPICS[(i + accepted) % len(TOPICS)]
        request = f"Compare {topic}: use search query={topic}"
        first = say(f"fix{i}", 1, request, [], {})
        say(f"fix{i}", 2, CORRECTION, next_history([], request, first.answer), {})
    return last


# --- the call graph -------------------------------------------------------------------------------


def _trial_calls(row: Mapping[str, Any]) -> tuple[int, int]:
    """``(policy calls, judge calls)`` of one stored trial row."""
    result = row.get("result") or {}
    replay = result.get("replay") or {}
    policy = int(replay.get("steps") or 0) if row.get("source") == "replay" else 0
    judge = int(((result.get("usage") or {}).get("judge") or {}).get("calls") or 0)
    return policy, judge


def _calls(usage: Mapping[str, Any] | None, role: str) -> int:
    return int(((usage or {}).get(role) or {}).get("calls") or 0)


def critical_path(params: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                  drafts: Mapping[str, Any], latency_ms: float, threads: int) -> dict[str, Any]:
    """The run's critical path and capacity bound (module docstring), in calls and milliseconds.

    Args:
        params: the run's stored context (``rsi_runs.params``).
        rows: the run's trial rows (:func:`~rsi_worker.consolidate.trials.row_json`).
        drafts: the run's drafts (``rsi_runs.drafts``).
        latency_ms: model latency per call.
        threads: worker threads of the cluster (for the capacity bound).
    """
    usage = params.get("usage") or {}
    inc = [sum(_trial_calls(r)) for r in rows if r["candidate"] == INCUMBENT]
    cand = [sum(_trial_calls(r)) for r in rows if r["candidate"] != INCUMBENT]
    draft = {v: _calls(d.get("usage"), "proposer") + _calls(d.get("usage"), "critic")
             for v, d in drafts.items()}
    longest = {v: max((sum(_trial_calls(r)) for r in rows if r["candidate"] == v), default=0) for v in draft}
    # a candidate's trials start when its own draft passed: the slowest draft-then-trial chain
    chain = max(draft, key=lambda v: (draft[v] + longest[v], v), default=None)
    segments = {
        "signal": -(-_calls(usage, "signal") // max(1, len(params.get("signals_read") or {}))),
        "incumbent_trial": max(inc, default=0),
        "analyst": _calls(usage, "analyst"),
        "draft": draft[chain] if chain is not None else 0,
        "candidate_trial": longest[chain] if chain is not None else 0,
    }
    n = max(1, threads)
    work = {v: sum(sum(_trial_calls(r)) for r in rows if r["candidate"] == v) for v in draft}
    capacity = (segments["signal"] + segments["analyst"] + max(max(inc, default=0), sum(inc) / n)
                + released_bound(draft, work, segments["draft"] + segments["candidate_trial"], n))
    total = sum(segments.values())
    return {
        "segments_calls": segments,
        "calls": total,
        "ms": round(total * latency_ms, 1),
        "capacity_calls": round(capacity, 2),
        "capacity_ms": round(capacity * latency_ms, 1),
        "capacity_over_cp": round(capacity / total, 3) if total else None,
        "trials": {"incumbent": len(inc), "candidates": len(cand)},
        "all_calls": {"incumbent_trials": sum(inc), "candidate_trials": sum(cand),
                      "drafts": sum(draft.values())},
    }


def released_bound(drafts: Mapping[str, int], trial_calls: Mapping[str, int], chain: int,
                   threads: int) -> float:
    """Lower bound, in calls, of the draft-and-trials fan-out on ``threads`` threads: ``chain`` (the
    slowest draft-then-trial chain) and, for each draft's end ``τ = d_c``, ``τ + W(τ) / threads`` with
    ``W(τ)`` the work no schedule can start before ``τ`` — the trial calls of every candidate whose
    draft ends at or after ``τ`` (its trials need its draft: ``launch_candidate``) plus what is left of
    the drafts still running. ``τ = 0`` is the plain work bound ``Σ calls / threads``.
    (docs/performance/consolidation.md#rsi-bench-consolidate)"""
    n = max(1, threads)
    best = float(chain)
    for tau in {0, *drafts.values()}:
        left = sum(trial_calls.get(v, 0) for v, d in drafts.items() if d >= tau)
        left += sum(d - tau for d in drafts.values() if d > tau)
        best = max(best, tau + left / n)
    return best


def failures_to_stop(params: Mapping[str, Any], k: int) -> dict[str, Any]:
    """How many failed trials (heaviest first) a candidate needs before the exact bound can stop
    it (docs/algorithm/formulas.md §2.10), from the run's stored round parameters — the floor on early stop's
    work.
    Reads only ``round.S_star``, ``round.delta``, ``round.S_t`` and ``checks`` (any stored version
    of the run context), typed: a wrong type is a ``StoredDataError`` naming the field."""
    from rsi_common.math.bounds import can_stop_exactly

    rnd = f.obj("params.round", params.get("round") or {})
    checks = f.obj("params.checks", params.get("checks") or {})
    sizes = [len(f.json_array(f.sub("params.checks", w), c)) for w, c in checks.items()]
    weights = sorted((n for n in sizes for _ in range(k)), reverse=True)
    total = sum(weights)
    if not rnd or not weights:
        return {"trials": len(weights), "needed": None}
    s_star, delta, s_t = (f.number(f.sub("params.round", key), rnd.get(key))
                          for key in ("S_star", "delta", "S_t"))
    failed = 0
    for n, w in enumerate(weights, start=1):
        failed += w
        if can_stop_exactly(0, failed, total - failed, s_star, delta, s_t):
            saving = round(100 * (1 - n / len(weights)), 1)
            return {"trials": len(weights), "needed": n, "max_saving_pct": saving}
    return {"trials": len(weights), "needed": None}


# --- reading runs ---------------------------------------------------------------------------------


def _await_run(sessions: sessionmaker[Session], agent: str, timeout_s: float) -> str:
    """Wait until ``agent`` has a run and none is running; returns the newest run id."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with sessions() as s:
            mine = runs(s, agent, 10)
            done = [r.id for r in mine if r.status in CLOSED]
            busy = any(r.status == "running" for r in mine)
            s.commit()
        if done and not busy:
            return done[0]
        time.sleep(0.02)
    raise TimeoutError(f"the run of {agent} did not finish within {timeout_s} s")


def _snapshot(sessions: sessionmaker[Session], run_id: str) -> dict[str, Any]:
    with sessions() as s:
        run = get_run(s, run_id)
        rows = [dict(row_json(r), created_at=r.created_at) for r in stored_rows(s, run_id)]
        out = {"id": run.id, "status": run.status, "reason": run.reason, "started_at": run.started_at,
               "finished_at": run.finished_at, "params": dict(run.params or {}),
               "drafts": dict(run.drafts or {}), "result": dict(run.result or {}), "rows": rows}
        s.commit()
    return out


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    return None if a is None or b is None else round((b - a).total_seconds(), 3)


def _timeline(snap: Mapping[str, Any]) -> dict[str, Any]:
    """When each phase's last trial row was stored, seconds after ``started_at`` (diagnosis)."""
    start = snap["started_at"]
    inc = [r["created_at"] for r in snap["rows"] if r["candidate"] == INCUMBENT]
    cand = [r["created_at"] for r in snap["rows"] if r["candidate"] != INCUMBENT]
    return {
        "first_incumbent_row_s": _seconds(start, min(inc)) if inc else None,
        "last_incumbent_row_s": _seconds(start, max(inc)) if inc else None,
        "first_candidate_row_s": _seconds(start, min(cand)) if cand else None,
        "last_candidate_row_s": _seconds(start, max(cand)) if cand else None,
        "finished_s": _seconds(start, snap["finished_at"]),
    }


def _candidate_calls(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Candidate-replay policy calls per candidate, and the rows' statuses."""
    per: dict[str, int] = {}
    statuses: dict[str, dict[str, int]] = {}
    for r in rows:
        if r["candidate"] == INCUMBENT:
            continue
        per[r["candidate"]] = per.get(r["candidate"], 0) + _trial_calls(r)[0]
        by = statuses.setdefault(r["candidate"], {})
        by[r["status"]] = by.get(r["status"], 0) + 1
    return {"policy_calls": per, "total": sum(per.values()), "rows": statuses}


def _brief(snap: Mapping[str, Any]) -> dict[str, Any]:
    rnd = (snap["result"] or {}).get("round") or {}
    return {"run_id": snap["id"], "status": snap["status"], "reason": snap["reason"],
            "winner": rnd.get("winner"), "W": len(snap["params"].get("worlds") or []),
            "candidates": [(c.get("variant"), c.get("outcome"), c.get("early_stopped"))
                           for c in rnd.get("candidates") or []]}


# --- the measurements -----------------------------------------------------------------------------


def _distributed(rt: Runtime, agent: str, cfg: ConsolidateBench) -> dict[str, Any]:
    """Trigger ``agent``'s run on the cluster and measure it from its stored rows."""
    io = _latest_io(rt, agent)
    dispatcher = KombuDispatcher(str(rt.settings.redis_url))
    try:
        triggered = datetime.now(UTC)
        handoff = trigger_consolidation(rt.coord, dispatcher, agent, io)
        if handoff.outcome != "enqueued":
            raise RuntimeError(f"trigger of {agent} was {handoff.outcome}")
        snap = _snapshot(rt.sessions, _await_run(rt.sessions, agent, cfg.timeout_s))
    finally:
        dispatcher.close()
    threads = cfg.workers * cfg.concurrency
    cp = critical_path(snap["params"], snap["rows"], snap["drafts"], cfg.latency_ms, threads)
    wall = _seconds(snap["started_at"], snap["finished_at"]) or 0.0
    return {
        **_brief(snap),
        "wall_s": wall,
        "trigger_to_finished_s": _seconds(triggered, snap["finished_at"]),
        "queue_wait_s": _seconds(triggered, snap["started_at"]),
        "critical_path": cp,
        "wall_over_cp": round(wall * 1000 / cp["ms"], 3) if cp["ms"] else None,
        "wall_over_capacity": round(wall * 1000 / cp["capacity_ms"], 3) if cp["capacity_ms"] else None,
        "timeline": _timeline(snap),
        "candidate_calls": _candidate_calls(snap["rows"]),
    }


def _latest_io(rt: Runtime, agent: str) -> str:
    from rsi_common.db import load_latest_worlds

    with rt.sessions() as s:
        io = str(load_latest_worlds(s, agent, 1)[0].io_id)
        s.commit()
    return io


def _inline(rt: Runtime, agent: str, threads: int, latency_ms: float) -> dict[str, Any]:
    """``agent``'s run in this process (``consolidate_inline`` + ``ThreadExecutor(threads)``)."""
    lease = rt.coord.try_begin(agent, _latest_io(rt, agent))
    if lease is None:
        raise RuntimeError(f"the lease of {agent} is held")
    t0 = time.monotonic()
    results = consolidate_inline(rt.deps, lease, ThreadExecutor(threads))
    elapsed = time.monotonic() - t0
    if not results or results[0].run_id is None:
        raise RuntimeError(f"the inline run of {agent} produced no result")
    snap = _snapshot(rt.sessions, results[0].run_id)
    cp = critical_path(snap["params"], snap["rows"], snap["drafts"], latency_ms, threads)
    wall = _seconds(snap["started_at"], snap["finished_at"]) or 0.0
    return {**_brief(snap), "wall_s": wall, "call_s": round(elapsed, 3), "critical_path": cp,
            "wall_over_cp": round(wall * 1000 / cp["ms"], 3) if cp["ms"] else None,
            "candidate_calls": _candidate_calls(snap["rows"])}


@contextlib.contextmanager
def _cluster(cfg: ConsolidateBench, home: Path) -> Iterator[Runtime]:
    """A private cluster with the benchmark's settings, and this process's runtime on it."""
    from rsi_worker.bench.models import bench_models
    from rsi_worker.local.embedded import EmbeddedCluster
    from rsi_worker.local.servers import redis_server_bin

    if redis_server_bin() is None:
        raise RuntimeError("rsi bench consolidate needs redis-server on PATH (real worker processes)")
    base = Settings(home=home, database_url=f"sqlite:///{home / 'rsi.db'}")
    settings = base.model_copy(update={
        "sim": base.sim.model_copy(update={"latency_ms": cfg.latency_ms}),
        "model_factory": FACTORY,
        "model_backoff_s": 0.0,
    })
    with EmbeddedCluster(settings, workers=cfg.workers, concurrency=cfg.concurrency,
                         mode="embedded-redis") as cluster:
        cluster.wait_ready(60.0)
        rt = open_runtime(cluster.settings, models=bench_models(cluster.settings))
        try:
            yield rt
        finally:
            rt.close()


def _early_stop(rt: Runtime, cfg: ConsolidateBench, label: str, accepted: int,
                corrected: int) -> dict[str, Any]:
    """Variant B made hopeless (its harness makes the policy refuse) on ``accepted`` + ``corrected``
    worlds: candidate-replay policy calls with early stop on (on the cluster) and off (in-process,
    with the cluster's total threads), the saving, and its ceiling (:func:`failures_to_stop`)."""
    from rsi_worker.bench.models import bench_models

    on_agent, off_agent = f"{label}-on", f"{label}-off"
    for agent in (on_agent, off_agent):
        seed_agent(rt.sessions, rt.settings, agent, model=HOPELESS_MODEL, accepted=accepted,
                   corrected=corrected)
    on = _distributed(rt, on_agent, cfg)
    params = rt.settings.consolidation.model_copy(update={"early_stop": False})
    off_settings = rt.settings.model_copy(update={"consolidation": params})
    off_rt = open_runtime(off_settings, models=bench_models(off_settings))
    try:
        off = _inline(off_rt, off_agent, cfg.workers * cfg.concurrency, cfg.latency_ms)
    finally:
        off_rt.close()
    calls_on, calls_off = on["candidate_calls"], off["candidate_calls"]
    b_on = calls_on["policy_calls"].get("B", 0)
    b_off = calls_off["policy_calls"].get("B", 0)
    with rt.sessions() as s:
        stored = dict(get_run(s, on["run_id"]).params or {})
        s.commit()
    needed = failures_to_stop(stored, rt.settings.consolidation.k)
    hopeless = saving_pct(b_off, b_on)
    return {
        "scenario": {"accepted": accepted, "corrected": corrected},
        "failures_needed": needed,
        "max_saving_pct": needed.get("max_saving_pct"),
        "on": {k: on[k] for k in ("run_id", "status", "candidates", "wall_s", "candidate_calls")},
        "off": {k: off[k] for k in ("run_id", "status", "candidates", "wall_s", "candidate_calls")},
        "candidate_calls_on": calls_on["total"],
        "candidate_calls_off": calls_off["total"],
        "saving_pct": saving_pct(calls_off["total"], calls_on["total"]),
        "hopeless_calls_on": b_on,
        "hopeless_calls_off": b_off,
        "hopeless_saving_pct": hopeless,
        "hopeless_of_ceiling_pct": of_ceiling(hopeless, needed.get("max_saving_pct")),
        "same_decision": (on["status"], on["winner"]) == (off["status"], off["winner"]),
    }


def saving_pct(off: int, on: int) -> float | None:
    """Calls saved by early stop, in % of the calls without it (``None`` when there were none)."""
    return round(100.0 * (off - on) / off, 1) if off else None


def of_ceiling(saving: float | None, ceiling: float | None) -> float | None:
    """A saving in % of its ceiling (``None`` when either is unknown or the ceiling is 0)."""
    return round(100.0 * saving / ceiling, 1) if saving is not None and ceiling else None


def _machine() -> dict[str, Any]:
    import os

    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {"cpus": os.cpu_count(), "loadavg_1m": round(load[0], 2), "loadavg_5m": round(load[1], 2)}


def bench_consolidate(cfg: ConsolidateBench | None = None) -> dict[str, Any]:
    """Run every measurement of the module docstring; returns the report (JSON-safe)."""
    from rsi_worker.bench.hops import bench_hops
    from rsi_worker.bench.nosignal import bench_no_signal

    cfg = cfg or ConsolidateBench()
    report: dict[str, Any] = {"config": {**{k: v for k, v in cfg.__dict__.items() if k != "home"}},
                              "machine_before": _machine()}
    with contextlib.ExitStack() as stack:
        home = cfg.home or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rsi-bench-")))
        rt = stack.enter_context(_cluster(cfg, home))
        p = rt.settings.consolidation
        report["config"].update(W=p.n_eval, k=p.k, m=p.m)
        for agent in ("dist", "inline"):
            seed_agent(rt.sessions, rt.settings, agent, accepted=cfg.accepted, corrected=cfg.corrected)
        threads = cfg.inline_threads or cfg.workers * cfg.concurrency
        report["config"]["inline_threads"] = threads
        dist = _distributed(rt, "dist", cfg)
        single = _inline(rt, "inline", threads, cfg.latency_ms)
        report["distributed"] = dist
        report["single_process"] = single
        report["threads"] = {"distributed": cfg.workers * cfg.concurrency, "single_process": threads}
        report["distributed_over_single"] = round(dist["wall_s"] / single["wall_s"], 3) \
            if single["wall_s"] else None
        report["early_stop"] = _early_stop(rt, cfg, "hopeless", cfg.hopeless_accepted, cfg.hopeless_corrected)
        report["early_stop_standard"] = _early_stop(rt, cfg, "standard", cfg.accepted, cfg.corrected)
        report["no_signal"] = bench_no_signal(rt, cfg.no_signal_runs)
        try:
            report["celery_hop"] = bench_hops(rt.settings)
        except Exception as exc:  # the other figures are kept
            report["celery_hop"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    report["machine_after"] = _machine()
    report["targets"] = _targets(report)
    return report


def _targets(report: Mapping[str, Any]) -> dict[str, Any]:
    """Each figure against its target (issue 15's table)."""
    dist, es, std, ns = report["distributed"], report["early_stop"], report["early_stop_standard"], \
        report["no_signal"]
    ratio = dist["wall_over_cp"]
    return {
        "wall_le_1_15_cp": ratio is not None and ratio <= 1.15,
        "distributed_faster_equal_threads": (report["distributed_over_single"] or 9.9) < 1.0,
        "hopeless_ge_90pct_of_ceiling": (es["hopeless_of_ceiling_pct"] or 0.0) >= 90.0,
        "standard_ge_90pct_of_ceiling": (std["hopeless_of_ceiling_pct"] or 0.0) >= 90.0,
        "no_signal_new_median_lt_3ms": ns["new"]["median_ms"] < 3.0,
        "same_decision_distributed_single": (dist["status"], dist["winner"]) == (
            report["single_process"]["status"], report["single_process"]["winner"]),
        "same_decision_early_stop": bool(es["same_decision"] and std["same_decision"]),
    }


def _mark(ok: bool) -> str:
    return "[green]met[/]" if ok else "[red]missed[/]"


def _stop_rows(name: str, es: Mapping[str, Any], ok: bool) -> list[tuple[str, str, str]]:
    need = es["failures_needed"]
    return [
        (f"5. early stop, {name}", f"{es['scenario']['accepted']} accepted + {es['scenario']['corrected']} "
         f"corrected; B stoppable after {need.get('needed')}/{need['trials']} failed trials", ""),
        ("   candidate policy calls on/off", f"{es['candidate_calls_on']}/{es['candidate_calls_off']} "
         f"(saved {es['saving_pct']} %)", ""),
        ("   hopeless B's calls on/off", f"{es['hopeless_calls_on']}/{es['hopeless_calls_off']} (saved "
         f"{es['hopeless_saving_pct']} % of a ceiling of {es['max_saving_pct']} %: "
         f"{es['hopeless_of_ceiling_pct']} %)", f"≥ 90 % of the ceiling {_mark(ok)}"),
        ("   same decision as without early stop", str(es["same_decision"]), ""),
    ]


def report_table(report: Mapping[str, Any]) -> Any:
    """The report as a rich table (metric, value, target)."""
    from rich.table import Table

    cfg, dist, single = report["config"], report["distributed"], report["single_process"]
    ns, tg = report["no_signal"], report["targets"]
    cp = dist["critical_path"]
    seg = " + ".join(f"{k} {v}" for k, v in cp["segments_calls"].items())
    table = Table(title=f"rsi bench consolidate — W={cfg['W']} k={cfg['k']} m={cfg['m']}, "
                        f"{cfg['workers']}×{cfg['concurrency']} threads, sim {cfg['latency_ms']:g} ms/call")
    for col in ("measurement", "value", "target"):
        table.add_column(col)
    m0, m1 = report["machine_before"], report["machine_after"]
    rows: list[tuple[str, str, str]] = [
        ("machine", f"{m0['cpus']} cpus, load {m0['loadavg_1m']} → {m1['loadavg_1m']}", ""),
        ("1. run (distributed)", f"{dist['status']} ({dist['winner']}), W={dist['W']}, {dist['run_id']}", ""),
        ("   wall started→finished", f"{dist['wall_s']:.3f} s", ""),
        ("   trigger→finished", f"{dist['trigger_to_finished_s']:.3f} s "
                                f"(queue wait {dist['queue_wait_s']:.3f} s)", ""),
        ("2. critical path", f"{cp['calls']} calls = {cp['ms'] / 1000:.3f} s ({seg})", ""),
        ("   capacity bound", f"{cp['capacity_calls']} calls = {cp['capacity_ms'] / 1000:.3f} s "
                             f"({cp['capacity_over_cp']} × CP)", ""),
        ("3. wall / critical path", f"{dist['wall_over_cp']}", f"≤ 1.15 {_mark(tg['wall_le_1_15_cp'])}"),
        ("   wall / capacity bound", f"{dist['wall_over_capacity']}", ""),
        ("   phase ends (s)", ", ".join(f"{k} {v}" for k, v in dist["timeline"].items()), ""),
        (f"4. single process ({cfg['inline_threads']} threads)",
         f"{single['status']} ({single['winner']}), wall {single['wall_s']:.3f} s", ""),
        ("   distributed / single (equal threads)", f"{report['distributed_over_single']}",
         f"< 1 {_mark(tg['distributed_faster_equal_threads'])}"),
        *_stop_rows("hopeless scenario", report["early_stop"], tg["hopeless_ge_90pct_of_ceiling"]),
        *_stop_rows("standard mix", report["early_stop_standard"], tg["standard_ge_90pct_of_ceiling"]),
    ]
    for key, label in (("new", "new conversation"), ("follow_up", "follow-up turn")):
        one = ns[key]
        target = f"< 3 ms {_mark(tg['no_signal_new_median_lt_3ms'])}" if key == "new" else "reported"
        rows += [
            (f"6. no-signal run, {label} ({one['runs']}×)", f"median {one['median_ms']} ms, p99 "
             f"{one['p99_ms']} ms, max {one['max_ms']} ms", target),
            ("   open / finalize median; reader calls per run", f"{one['open_median_ms']} / "
             f"{one['finalize_median_ms']} ms; {one['signal_calls_per_run']}", ""),
            ("   CPU of the task's thread per run, median", f"{one.get('cpu_median_ms')} ms", ""),
        ]
    hop = report.get("celery_hop")
    if hop and "error" not in hop:
        rows.append(("7. Celery hop (no-op task round trip)", f"median {hop['median_ms']} ms, p90 "
                     f"{hop['p90_ms']} ms ({hop['n']}×)", ""))
    for row in rows:
        table.add_row(*row)
    return table
