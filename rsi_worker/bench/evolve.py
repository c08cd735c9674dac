"""``rsi bench evolve``: an offline evolve run on a generated sim suite (docs/algorithm/evolve.md),
measured round by round (a measurement, not a test).

Per round: S on the evolve split (the incumbent's Ŝ after the round), held-out S, δ, adoption, model calls
by role, the round's wall (``wall_s``: the round from its start to its stored state, plus, for the last
round, its winner's held-out evaluation; ``call_wall_s`` adds the bench's ``run --rounds 1`` call around it:
loading the run, its status writes) and its capacity-aware bound: ``latency ×``
:func:`~rsi_worker.bench.evolve_bound.lower_bound`
of the round's graph as it ran (:func:`~rsi_worker.bench.evolve_bound.round_jobs`: the digesters, the
reporter, each draft, its smoke trials, its other trials, the held-out trials) over the round's threads
(``digest_parallel`` digesters — the bench gives them ``eval_parallel × trial_parallel`` —, ``eval_parallel``
drafts, ``eval_parallel × trial_parallel`` trial slots); ``structure_s``: that graph's wall as the engine
schedules it with no overhead (:func:`~rsi_worker.bench.evolve_bound.list_schedule`), so ``wall_s −
structure_s`` is the overhead (SQL, JSON, gate checks, threads on busy cores). ``phases_s`` per round:
the walls of the analysis, of each variant's draft and of its smoke and evaluation (a variant's trials
start as soon as its draft passed; ``smoke V`` and ``smoke stored V``: its smoke trials and the draft's
store after them), of all candidates, of the previous winner's held-out evaluation (it
runs beside the round), and ``other`` (the rest: views, SQL and JSON, judging).
With ``distributed``, ``distributed.timeline`` per round: where the cluster's round went, from the workers'
own marks (:mod:`rsi_worker.bench.evolve_timeline`: steps, reloads, sends, hops, the trials' read, run,
save and join).
``heldout_gain`` = last held-out S − H0's;
``heldout_regressions`` = adopted rounds that lowered held-out S by more than δ.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from rsi_common.config import Settings, SimConfig
from rsi_common.db import make_engine, session_factory, upgrade
from rsi_common.math import RRSIParams
from rsi_worker.bench.evolve_bound import list_schedule, lower_bound, round_jobs
from rsi_worker.bench.evolve_suite import sim_suite
from rsi_worker.bench.evolve_timeline import round_timelines
from rsi_worker.consolidate import default_models
from rsi_worker.evolve.config import EvolveConfig
from rsi_worker.evolve.engine import EvolveEnv, run_inline
from rsi_worker.evolve.store import Store
from rsi_worker.evolve.timeline import FILE_NAME

__all__ = ["bench_evolve"]


def _calls(usage: dict[str, Any], roles: tuple[str, ...]) -> int:
    return sum(int((usage.get(r) or {}).get("calls", 0)) for r in roles)


def _bound_units(
    store: Store, rnd: dict[str, Any], usage: dict[str, Any], config: EvolveConfig, heldout: int, last: bool
) -> tuple[float, float]:
    """The round's bound and its overhead-free wall (``list_schedule``) in latency units (module
    docstring). ``heldout``: trials of one held-out evaluation; the previous winner's runs beside the
    round, the last round's own winner after it."""
    t = int(rnd["t"])
    trials: dict[str, int] = {}
    for r in store.trials("bench", t):
        if r["status"] != "cancelled" and r["candidate"] in (rnd.get("drafts") or {}):
            trials[r["candidate"]] = trials.get(r["candidate"], 0) + 1
    owed = bool((rnd.get("before") or {}).get("heldout_pending"))
    adopted_last = last and (rnd.get("decision") or {}).get("winner") is not None
    jobs = round_jobs(
        rnd,
        trials,
        digester_calls=_calls(usage, ("digester",)),
        heldout_owed=heldout * int(owed),
        heldout_after=heldout * int(adopted_last),
    )
    slots = config.eval_parallel * config.trial_parallel
    pools = {"digest": config.digest_parallel, "draft": config.eval_parallel, "trial": slots, "main": 1}
    return lower_bound(jobs, pools), list_schedule(jobs, pools)


def decisions_of(store: Store, name: str = "bench") -> list[Any]:
    """Per judged round: ``(t, winner, δ, S★, [(variant, reason code, S)])``."""
    out = []
    for r in store.rounds(name):
        d = r["decision"] or {}
        if r["t"] >= 0 and d:
            out.append(
                [
                    r["t"],
                    d["winner"],
                    d["delta"],
                    d["S_star"],
                    [
                        [c["variant"], c["decision"]["reason_code"], (c["ev"] or {}).get("S")]
                        for c in d["candidates"]
                    ],
                ]
            )
    return out


def _on_cluster(suite: Any, config: EvolveConfig, latency_ms: float, inline: list[Any]) -> dict[str, Any]:
    """The same run on 2 worker processes × (eval_parallel · trial_parallel / 2) threads; walls from SQL
    polled every 50 ms (baseline, then each round's end)."""
    from rsi_common.coord import Coordinator
    from rsi_common.dispatch import KombuDispatcher
    from rsi_worker.cluster.evolve_watch import launch
    from rsi_worker.local.embedded import EmbeddedCluster
    from rsi_worker.runtime import redis_client

    threads = max(1, config.eval_parallel * config.trial_parallel // 2)
    with tempfile.TemporaryDirectory(prefix="rsi-bench-evolve-cluster-") as tmp:
        home = Path(tmp)
        base = Settings(home=home, database_url=f"sqlite:///{home / 'rsi.db'}")
        settings = base.model_copy(
            update={"sim": base.sim.model_copy(update={"latency_ms": latency_ms}), "model_backoff_s": 0.0}
        )
        (home / FILE_NAME).touch()  # the workers' timeline (rsi_worker/evolve/timeline.py)
        with EmbeddedCluster(settings, workers=2, concurrency=threads, mode="embedded-redis") as cl:
            cl.wait_ready(120.0)
            engine = make_engine(cl.settings.database_url)
            upgrade(engine)
            store = Store(session_factory(engine))
            store.save_suite(suite)
            store.create("bench", suite.name, config)
            store.set_run("bench", status="running")
            coord = Coordinator(redis_client(cl.settings), lease_s=cl.settings.lease_s)
            t0 = time.perf_counter()
            launch(coord, KombuDispatcher(str(cl.settings.redis_url)), "bench")
            marks: dict[int, float] = {}  # n → when state.t reached n (0: the baseline ended)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                _, _, status, _, state = store.run("bench")
                now = time.perf_counter() - t0
                for n in range(int(state["t"]) + 1 if state else 0):
                    marks.setdefault(n, now)
                if status != "running":
                    break
                time.sleep(0.05)
            wall = time.perf_counter() - t0
            decided = decisions_of(store)
            engine.dispose()
        timeline = round_timelines(home / FILE_NAME)
    rounds = [round(marks[n + 1] - marks[n], 3) for n in range(len(marks) - 1)]
    return {
        "workers": 2,
        "threads_per_worker": threads,
        "status": status,
        "baseline_wall_s": round(marks[0], 3) if 0 in marks else None,
        "round_walls_s": rounds,
        "wall_s": round(wall, 3),
        "same_decisions": decided == inline,
        "timeline": timeline,
    }


def bench_evolve(
    *,
    tasks: int = 8,
    heldout: int = 4,
    rounds: int = 3,
    k: int = 2,
    latency_ms: float = 20.0,
    trial_parallel: int = 4,
    eval_parallel: int = 2,
    seed: int = 7,
    distributed: bool = False,
) -> dict[str, Any]:
    """Run the generated suite inline (and, with ``distributed``, on a private 2-worker cluster with the
    same total threads) and report (module docstring)."""
    import rsi_worker.roles  # noqa: F401 - registers the sim's role behaviours

    with tempfile.TemporaryDirectory(prefix="rsi-bench-evolve-") as tmp:
        settings = Settings(
            database_url=f"sqlite:///{Path(tmp) / 'rsi.db'}", sim=SimConfig(latency_ms=latency_ms)
        )
        engine = make_engine(settings.database_url)
        upgrade(engine)
        sessions = session_factory(engine)
        store = Store(sessions)
        suite = sim_suite("bench", n_tasks=tasks, n_heldout=heldout, seed=seed)
        store.save_suite(suite)
        config = EvolveConfig(
            params=RRSIParams(T=rounds, k=k),
            trial_parallel=trial_parallel,
            eval_parallel=eval_parallel,
            digest_parallel=eval_parallel * trial_parallel,  # every phase gets the bound's slots
            seed=seed,
        )
        store.create("bench", suite.name, config)
        env = EvolveEnv(sessions, default_models(settings), settings)
        t0 = time.perf_counter()
        run_inline(env, "bench", max_rounds=0)
        baseline_s = time.perf_counter() - t0
        per_round: list[dict[str, Any]] = []
        prev = dict((store.run("bench")[4] or {}).get("usage") or {})
        for _ in range(rounds):
            t1 = time.perf_counter()
            out = run_inline(env, "bench", max_rounds=1)
            call_wall = time.perf_counter() - t1
            state = store.run("bench")[4] or {}
            usage = state.get("usage") or {}
            delta_usage = {
                r: {"calls": int(u.get("calls", 0)) - int((prev.get(r) or {}).get("calls", 0))}
                for r, u in usage.items()
            }
            prev = dict(usage)
            t = int(state["t"]) - 1
            rnd = store.round("bench", t) or {}
            units = _bound_units(store, rnd, delta_usage, config, heldout * k, out.status == "done")
            bound, structure = (latency_ms / 1000 * u for u in units)
            phases = {name: round(sec, 3) for pt, name, sec in env.phases if pt == t}
            # the round itself (not this call's load of the run and its status writes), and the last
            # round's winner measured on the held-out split before the run ends
            wall = phases.pop("round") + phases.get("heldout (at the run's end)", 0.0)
            top = sum(phases.get(k, 0.0) for k in ("analysis", "candidates"))
            phases["other"] = round(max(0.0, wall - top), 3)  # views, SQL and JSON, judging, state
            per_round.append(
                {
                    "t": t,
                    "S": state.get("S_t"),
                    "S_star": state.get("S_star"),
                    "heldout_S": None,  # measured beside the next round: filled in below
                    "delta": state.get("delta"),
                    "adopted": (rnd.get("decision") or {}).get("winner") is not None,
                    "calls": {r: u["calls"] for r, u in delta_usage.items()},
                    "wall_s": round(wall, 3),
                    "call_wall_s": round(call_wall, 3),
                    "bound_s": round(bound, 3),
                    "wall_over_bound": round(wall / bound, 3) if bound else None,
                    "structure_s": round(structure, 3),
                    "phases_s": phases,
                }
            )
            if out.status in ("done", "failed"):
                break
        state = store.run("bench")[4] or {}
        for r in per_round:
            held = [h for h in state.get("heldout", []) if h["t"] == r["t"]]
            r["heldout_S"] = held[-1]["S"] if held else None
        inline_decisions = decisions_of(store)
        inline_wall = baseline_s + sum(r["call_wall_s"] for r in per_round)
        engine.dispose()
    cluster = None
    if distributed:
        cluster = _on_cluster(suite, config, latency_ms, inline_decisions)
        cluster["inline_wall_s"] = round(inline_wall, 3)
        cluster["distributed_over_inline"] = (
            round(cluster["wall_s"] / inline_wall, 3) if inline_wall else None
        )
    delta = float(state.get("delta") or 0.0)
    held_series = [h["S"] for h in state.get("heldout", [])]
    regressions = 0
    last = held_series[0] if held_series else None
    for h in state.get("heldout", [])[1:]:
        if last is not None and h["S"] < last - delta:
            regressions += 1
        last = h["S"]
    return {
        "tasks": tasks,
        "heldout_tasks": heldout,
        "rounds": len(per_round),
        "k": k,
        "latency_ms": latency_ms,
        "trial_parallel": trial_parallel,
        "eval_parallel": eval_parallel,
        "delta": delta,
        "S_base": (state.get("trajectory") or [None])[0],
        "S_final": state.get("S_t"),
        "heldout_S_base": held_series[0] if held_series else None,
        "heldout_S_final": held_series[-1] if held_series else None,
        "heldout_gain": round(held_series[-1] - held_series[0], 6) if held_series else None,
        "heldout_regressions": regressions,
        "adoptions": len(state.get("accepted", [])),
        "baseline_wall_s": round(baseline_s, 3),
        "per_round": per_round,
        "max_wall_over_bound": max((r["wall_over_bound"] or 0 for r in per_round), default=None),
        "same_decisions": None if cluster is None else cluster["same_decisions"],
        "distributed": cluster,
    }
