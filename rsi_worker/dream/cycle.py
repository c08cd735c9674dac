"""The Dream cycle (docs/dream/cycle.md): deploy → split → develop → select → sweep → confirm → β.

Each phase ends with the cycle's state written in its own transaction (``rsi_dream_cycles.state``)
and every replay episode is stored as it finishes (``rsi_dream_episodes``), so a cycle stopped
anywhere resumes from its last phase with the episodes already run: running ``run_cycle`` again for
the agent continues its unfinished cycle. Statuses: ``running``, then ``kept`` (π⁰ selected),
``pending_confirmation`` (no confirmation hook), ``vetoed`` (π⁰ stays) or ``promoted`` (a new harness
version whose ``exploration_policy`` is the winner, with the cycle id as its run id).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.db.dream import (
    DreamCycleRow,
    add_dream_world,
    dream_cycles,
    dream_episodes,
    dream_worlds,
    save_dream_episode,
)
from rsi_common.errors import ModelError
from rsi_common.harness.bundled import h0
from rsi_common.harness.payload import Harness, materialize
from rsi_common.llm.base import ModelClient
from rsi_common.math.dream import (
    DEFAULT_BETA,
    BetaSweep,
    LiveCycle,
    SweepPoint,
    assert_non_decreasing,
    next_default_beta,
    select_policy,
)
from rsi_common.math.params import RRSIParams
from rsi_common.math.selection import cost_rule, floor_ok
from rsi_worker.dream.adapter import load_adapter
from rsi_worker.dream.devagent import extract_code, revision_prompt
from rsi_worker.dream.evaluate import EvalParams, Executor, InlineExecutor, evaluate_value, sweep
from rsi_worker.dream.policies import PolicyCode, harness_policy, with_policy
from rsi_worker.dream.replay import LiveQuestion, run_episode
from rsi_worker.dream.sandbox import PolicyRejected, check_source
from rsi_worker.dream.simtasks import SearchTask, SimSearchTask, SimTaskParams, generate_worlds
from rsi_worker.dream.tree import TreeWorld, load_world

__all__ = ["CycleConfig", "SqlEpisodeStore", "current_harness", "in_selection", "run_cycle", "split_worlds"]

PHASES = ("deploy", "develop", "select", "sweep", "confirm", "done")
FAILING_STOPS = frozenset({"error", "timeout", "invalid_plan", "out_of_support"})
TaskFactory = Callable[[str], SearchTask]


@dataclass(frozen=True)
class CycleConfig:
    """Knobs of one cycle (docs/dream/cycle.md#settings)."""

    seed: int = 0
    revisions: int = 3
    """M − 1."""
    max_repairs: int = 2
    tie: str = "production"
    tol: float = 1e-9
    confirm_delta: float = 0.0
    min_worlds: int = 8
    """Generated sim worlds added when the agent has fewer trees."""
    task_params: SimTaskParams = field(default_factory=SimTaskParams)
    params: EvalParams = field(default_factory=EvalParams)
    confirm: bool = True
    """False: no confirmation hook (status ``pending_confirmation``)."""
    stop_after: str | None = None
    """Stop (status stays ``running``) after this phase: tests of resumption."""
    adapter: str | None = None
    """``module:factory`` of the user's live tasks (docs/dream/cycle.md#task-adapters); None = the sim's."""


def _config_json(cfg: CycleConfig) -> dict[str, Any]:
    tp = cfg.task_params
    return {
        "seed": cfg.seed,
        "revisions": cfg.revisions,
        "max_repairs": cfg.max_repairs,
        "tie": cfg.tie,
        "tol": cfg.tol,
        "confirm_delta": cfg.confirm_delta,
        "min_worlds": cfg.min_worlds,
        "confirm": cfg.confirm,
        "task_params": {
            k: getattr(tp, k)
            for k in ("branches", "refine", "baseline_lo", "baseline_hi", "span", "noise", "fail_rate")
        },
        "params": cfg.params.to_json(),
        "adapter": cfg.adapter,
    }


def _config_from(d: dict[str, Any], *, stop_after: str | None) -> CycleConfig:
    return CycleConfig(
        seed=int(d["seed"]),
        revisions=int(d["revisions"]),
        max_repairs=int(d["max_repairs"]),
        tie=str(d["tie"]),
        tol=float(d["tol"]),
        confirm_delta=float(d["confirm_delta"]),
        min_worlds=int(d["min_worlds"]),
        task_params=SimTaskParams(**d["task_params"]),
        params=EvalParams.from_json(d["params"]),
        confirm=bool(d["confirm"]),
        stop_after=stop_after,
        adapter=None if d.get("adapter") is None else str(d["adapter"]),
    )


def in_selection(task_id: str) -> bool:
    """Production split: the selection half iff ``int(sha256(task_id), 16) % 2 == 1``."""
    return int(hashlib.sha256(task_id.encode()).hexdigest(), 16) % 2 == 1


def split_worlds(worlds: Sequence[TreeWorld]) -> tuple[list[TreeWorld], list[TreeWorld]]:
    """``(dev, selection)`` by task; if one half is empty both are all worlds (project decision)."""
    dev = [w for w in worlds if not in_selection(w.task_id)]
    sel = [w for w in worlds if in_selection(w.task_id)]
    if not dev or not sel:
        return list(worlds), list(worlds)
    return dev, sel


class SqlEpisodeStore:
    """The cycle's episodes in ``rsi_dream_episodes`` (one transaction per save)."""

    def __init__(self, factory: sessionmaker[Session], cycle_id: str) -> None:
        self.factory, self.cycle_id = factory, cycle_id

    def load(self, label: str) -> dict[tuple[str, str], dict[str, Any]]:
        with self.factory() as s:
            return dream_episodes(s, self.cycle_id, label)

    def save(self, label: str, world_id: str, bkey: str, result: dict[str, Any]) -> None:
        with self.factory.begin() as s:
            save_dream_episode(s, self.cycle_id, label, world_id, bkey, result)


def current_harness(s: Session, agent_id: str) -> Harness:
    """The agent's current harness (H0 when it has none)."""
    agent = db.get_agent(s, agent_id)
    if agent.current_version is None:
        return h0()
    return materialize(db.get_harness(s, agent_id, agent.current_version).payload)


def _save(factory: sessionmaker[Session], cycle_id: str, state: dict[str, Any], status: str) -> None:
    with factory.begin() as s:
        row = s.get(DreamCycleRow, cycle_id)
        assert row is not None
        row.state, row.status = dict(state), status


def _open(factory: sessionmaker[Session], agent_id: str, cfg: CycleConfig) -> tuple[str, dict[str, Any]]:
    with factory.begin() as s:
        db.ensure_agent(s, agent_id)
        cycles = dream_cycles(s, agent_id)
        if cycles and cycles[-1].status == "running":
            return cycles[-1].id, dict(cycles[-1].state)
        iteration = cycles[-1].iteration + 1 if cycles else 1
        prev_beta = (cycles[-1].state.get("next_beta") or {}).get("beta") if cycles else None
        cycle_id = "dc_" + hashlib.sha256(f"{agent_id}\x00{iteration}".encode()).hexdigest()[:24]
        incumbent = harness_policy(current_harness(s, agent_id))
        if prev_beta is not None:
            incumbent = incumbent.with_beta(float(prev_beta))
        state = {
            "phase": "deploy",
            "iteration": iteration,
            "seed": cfg.seed,
            "incumbent": incumbent.to_json(),
            "params": cfg.params.to_json(),
            "config": _config_json(cfg),
        }
        s.add(
            DreamCycleRow(id=cycle_id, agent_id=agent_id, iteration=iteration, status="running", state=state)
        )
        if len(dream_worlds(s, agent_id)) < cfg.min_worlds:
            have = {r.world_id for r in dream_worlds(s, agent_id)}
            for w in generate_worlds(cfg.seed, cfg.min_worlds, cfg.task_params, prefix=f"{agent_id}-gen"):
                if w.world_id not in have:
                    add_dream_world(s, agent_id, w.to_json(), origin="generated")
        return cycle_id, state


def _live(
    task: SearchTask, code: PolicyCode, world_id: str, params: EvalParams
) -> tuple[dict[str, Any], TreeWorld]:
    q = LiveQuestion(task, world_id=world_id, W=params.W)
    with code.session(params.limits) as session:
        res = run_episode(q, session, code.default_beta)
    tree = q.recorded({"origin": "live", "policy": code.name, "beta": code.default_beta})
    evaluated = sum(1 for c in tree.cells if c.score is not None)
    return {
        "best_score": res.best_score,
        "cells": evaluated,
        "tokens": res.tokens,
        "beta": code.default_beta,
        "stop_reason": res.stop_reason,
        "task_id": task.task_id,
        "world_id": world_id,
    }, tree


def _worlds(factory: sessionmaker[Session], agent_id: str) -> list[TreeWorld]:
    with factory() as s:
        return [load_world(r.tree) for r in dream_worlds(s, agent_id)]


def _develop(
    state: dict[str, Any],
    dev: list[TreeWorld],
    cfg: CycleConfig,
    client: ModelClient,
    executor: Executor,
    store: SqlEpisodeStore,
    save: Callable[[], None],
    progress: Callable[[str], None],
) -> None:
    versions = state.setdefault("versions", [state["incumbent"]])
    summaries = state.setdefault("dev", [])
    if not summaries:
        v0, per = evaluate_value(PolicyCode.from_json(versions[0]), "dev0", dev, cfg.params, executor, store)
        summaries.append({"name": versions[0]["name"], "V": v0, "traces": _brief(per)})
        save()
    failures = state.setdefault("failures", [])
    while len(summaries) + len(failures) <= cfg.revisions:
        r = len(summaries) + len(failures)
        repair: str | None = None
        for attempt in range(cfg.max_repairs + 1):
            code, repair = _attempt(r, attempt, summaries, repair, client, cfg, dev, executor, store)
            if code is not None:
                V, per = evaluate_value(code, f"dev{len(versions)}", dev, cfg.params, executor, store)
                versions.append(code.to_json())
                summaries.append({"name": code.name, "V": V, "traces": _brief(per), "repairs": attempt})
                progress(f"revision {r}: {code.name} dev V = {V:.4f} ({attempt} repair(s))")
                break
        else:
            failures.append({"revision": r, "reason": (repair or "")[:500]})
            progress(f"revision {r}: dropped after {cfg.max_repairs} repairs")
        save()


def _brief(per: dict[str, Any]) -> dict[str, Any]:
    return {
        w: {"V": round(x["V"], 6), "stop": x["stop_reason"], "N": x["N"], "batches": x["batches"][:4]}
        for w, x in list(per.items())[:6]
    }


def _attempt(
    r: int,
    attempt: int,
    summaries: list[dict[str, Any]],
    repair: str | None,
    client: ModelClient,
    cfg: CycleConfig,
    dev: list[TreeWorld],
    executor: Executor,
    store: SqlEpisodeStore,
) -> tuple[PolicyCode | None, str | None]:
    try:
        reply = client.complete(revision_prompt(r, summaries, repair))
    except ModelError as exc:
        return None, f"model call failed: {type(exc).__name__}"
    source = extract_code(reply.text)
    first = source.splitlines()[0] if source else ""
    name = first[len("# name: ") :].strip()[:60] if first.startswith("# name: ") else f"revision_{r}"
    try:
        check_source(source)
    except PolicyRejected as exc:
        return None, str(exc)
    code = PolicyCode(name, source, DEFAULT_BETA, cfg.params.W)
    smoke = evaluate_value(code, f"smoke{r}.{attempt}", dev[:2], cfg.params, executor, store)[1]
    bad = [
        f"{w}: {x['stop_reason']} {x['message']}"
        for w, x in smoke.items()
        if x["stop_reason"] in FAILING_STOPS
    ]
    if bad:
        return None, "validation failed: " + "; ".join(bad)[:800]
    return code, None


def _confirm(state: dict[str, Any], cfg: CycleConfig, task_factory: TaskFactory) -> str:
    winner = PolicyCode.from_json(state["versions"][state["m_star"]])
    inc = state["live"]
    live, tree = _live(task_factory(inc["task_id"]), winner, inc["world_id"] + "-confirm", cfg.params)
    state["confirm"] = live
    state["confirm_tree"] = tree.to_json()
    p = RRSIParams()
    dS = live["best_score"] - inc["best_score"]
    dC = (live["cells"] - inc["cells"]) / max(1, inc["cells"])
    ok_floor = floor_ok(live["best_score"], inc["best_score"], cfg.confirm_delta)
    ok_cost, why = cost_rule(
        dS, dC, 0, cfg.confirm_delta, beta0=p.beta0, beta1=p.beta1, w_s=p.w_s, w_c=p.w_c, w_n=p.w_n
    )
    state["confirm"].update(
        {"delta_S": dS, "delta_C": dC, "floor_ok": ok_floor, "cost_ok": ok_cost, "why": why}
    )
    return "promoted" if ok_floor and ok_cost else "vetoed"


def _next_beta(factory: sessionmaker[Session], agent_id: str, state: dict[str, Any]) -> dict[str, Any]:
    with factory() as s:
        rows = dream_cycles(s, agent_id)
    live, sweeps = [], []
    for row in rows:
        st = state if row.iteration == state["iteration"] else row.state
        if "live" in st:
            live.append(LiveCycle(row.iteration, st["live"]["best_score"], st["live"]["beta"]))
        if "sweep" in st:
            pts = tuple(SweepPoint.from_json(p) for p in st["sweep"]["points"])
            sweeps.append(BetaSweep(row.iteration, pts))
    return next_default_beta(live, sweeps).to_json()


def _promote(factory: sessionmaker[Session], agent_id: str, cycle_id: str, code: PolicyCode) -> str:
    with factory.begin() as s:
        db.lock_agent(s, agent_id)
        current = current_harness(s, agent_id)
        new = with_policy(current, code, cycle_id=cycle_id)
        db.add_harness(
            s,
            agent_id,
            new.version,
            new.payload(),
            parent_version=current.version,
            run_id=cycle_id,
            summary={"dream_cycle": cycle_id, "policy": code.name},
        )
        db.rollback_to(s, agent_id, new.version)
        return new.version


def _finish(
    factory: sessionmaker[Session],
    agent_id: str,
    cycle_id: str,
    state: dict[str, Any],
    cfg: CycleConfig,
    tasks: TaskFactory,
) -> str:
    """Steps 5–6: the status, the next β and, when confirmed, the promotion. Idempotent: a repeated
    promotion finds its content-addressed version stored, a repeated tree its world id."""
    if state["m_star"] == 0:
        status = "kept"
    elif not cfg.confirm:
        status = "pending_confirmation"
    else:
        status = _confirm(state, cfg, tasks)
    state["next_beta"] = _next_beta(factory, agent_id, state)
    if status == "promoted":
        winner = PolicyCode.from_json(state["versions"][state["m_star"]]).with_beta(
            state["next_beta"]["beta"]
        )
        state["promoted_version"] = _promote(factory, agent_id, cycle_id, winner)
    if "confirm_tree" in state:
        with factory.begin() as s:
            add_dream_world(s, agent_id, state.pop("confirm_tree"), origin="live", cycle_id=cycle_id)
    return status


def run_cycle(
    factory: sessionmaker[Session],
    agent_id: str,
    client: ModelClient,
    cfg: CycleConfig | None = None,
    *,
    executor: Executor | None = None,
    executor_for: Callable[[str], Executor] | None = None,
    task_factory: TaskFactory | None = None,
    progress: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Run (or resume) the agent's cycle to its end or to ``cfg.stop_after``; the final state with
    ``cycle_id`` and ``status``."""
    cfg = cfg or CycleConfig()
    cycle_id, state = _open(factory, agent_id, cfg)
    if "config" in state:  # a resumed cycle keeps the configuration it started with
        cfg = _config_from(state["config"], stop_after=cfg.stop_after)
    if task_factory is None and cfg.adapter is not None:
        task_factory = load_adapter(cfg.adapter)
    tasks = task_factory or (lambda tid: SimSearchTask(cfg.seed, tid, cfg.task_params))
    ex = executor or (executor_for(cycle_id) if executor_for is not None else InlineExecutor())
    store = SqlEpisodeStore(factory, cycle_id)
    status = "running"

    def save(st: str = "running") -> None:
        _save(factory, cycle_id, state, st)

    def phase_done(name: str, nxt: str) -> bool:
        state["phase"] = nxt
        save(status)
        return cfg.stop_after == name

    if state["phase"] == "deploy":
        incumbent = PolicyCode.from_json(state["incumbent"])
        live, tree = _live(
            tasks(f"{agent_id}-live-{state['iteration']}"),
            incumbent,
            f"{agent_id}-live-{state['iteration']}",
            cfg.params,
        )
        with factory.begin() as s:
            add_dream_world(s, agent_id, tree.to_json(), origin="live", cycle_id=cycle_id)
        state["live"] = live
        progress(
            f"deploy: live cycle of {incumbent.name} at beta {incumbent.default_beta}: "
            f"best {live['best_score']:.4f} in {live['cells']} cells"
        )
        if phase_done("deploy", "develop"):
            return {**state, "cycle_id": cycle_id, "status": status}
    dev, sel = split_worlds(_worlds(factory, agent_id))
    if state["phase"] == "develop":
        _develop(state, dev, cfg, client, ex, store, save, progress)
        if phase_done("develop", "select"):
            return {**state, "cycle_id": cycle_id, "status": status}
    if state["phase"] == "select":
        V = [
            evaluate_value(PolicyCode.from_json(v), f"sel{m}", sel, cfg.params, ex, store)[0]
            for m, v in enumerate(state["versions"])
        ]
        m_star = select_policy(V, tie=cfg.tie, tol=cfg.tol)
        assert_non_decreasing(V, m_star)
        state.update({"V": V, "m_star": m_star})
        progress(f"select: V = {[round(x, 4) for x in V]} -> m* = {m_star}")
        if phase_done("select", "sweep"):
            return {**state, "cycle_id": cycle_id, "status": status}
    if state["phase"] == "sweep":
        report = sweep(
            PolicyCode.from_json(state["versions"][state["m_star"]]), "sweep", sel, cfg.params, ex, store
        )
        state["sweep"] = report.to_json()
        progress(f"sweep: auc {report.auc:.4f} penalty {report.penalty:.4f} reward {report.reward:.4f}")
        if phase_done("sweep", "confirm"):
            return {**state, "cycle_id": cycle_id, "status": status}
    if state["phase"] == "confirm":
        status = _finish(factory, agent_id, cycle_id, state, cfg, tasks)
        progress(f"cycle {cycle_id}: {status}; next default beta {state['next_beta']['beta']}")
        state["phase"] = "done"
        save(status)
    else:
        with factory() as s:
            row = s.get(DreamCycleRow, cycle_id)
            status = row.status if row is not None else status
    return {**state, "cycle_id": cycle_id, "status": status}


def cycle_rows(factory: sessionmaker[Session], agent_id: str) -> list[dict[str, Any]]:
    """Status lines of the agent's cycles (``rsi dream status``)."""
    with factory() as s:
        rows = dream_cycles(s, agent_id)
        n_worlds = s.scalar(
            sa.select(sa.func.count())
            .select_from(db.dream.DreamWorldRow)
            .where(db.dream.DreamWorldRow.agent_id == agent_id)
        )
    return [
        {
            "cycle_id": r.id,
            "iteration": r.iteration,
            "status": r.status,
            "phase": r.state.get("phase"),
            "V": r.state.get("V"),
            "m_star": r.state.get("m_star"),
            "next_beta": (r.state.get("next_beta") or {}).get("beta"),
            "promoted_version": r.state.get("promoted_version"),
            "worlds": n_worlds,
        }
        for r in rows
    ]


def explore(
    factory: sessionmaker[Session],
    agent_id: str,
    task: SearchTask,
    *,
    beta: float | None = None,
    params: EvalParams | None = None,
) -> dict[str, Any]:
    """One live exploration of ``task`` with the agent's current policy; the tree is stored
    (origin ``live``, world id ``{task_id}-live``; a second exploration of the same task is kept once)."""
    params = params or EvalParams()
    with factory.begin() as s:
        db.ensure_agent(s, agent_id)
        code = harness_policy(current_harness(s, agent_id))
    if beta is not None:
        code = code.with_beta(beta)
    live, tree = _live(task, code, f"{task.task_id}-live", params)
    with factory.begin() as s:
        _, created = add_dream_world(s, agent_id, tree.to_json(), origin="live")
    return {**live, "policy": code.name, "stored": created}


def import_trees(
    factory: sessionmaker[Session], agent_id: str, lines: Sequence[str | bytes], *, atomic: bool = False
) -> dict[str, Any]:
    """Validate JSON Lines of trees and store the good ones (origin ``imported``): ``{imported,
    existing, errors: [{line, error}]}``. ``atomic``: nothing is stored when any line is bad."""
    from rsi_worker.dream.tree import read_lines

    good: list[TreeWorld] = []
    errors: list[dict[str, Any]] = []
    for n, item in read_lines(lines):
        if isinstance(item, TreeWorld):
            good.append(item)
        else:
            errors.append({"line": n, "error": str(item)[:300]})
    imported = existing = 0
    if not (atomic and errors):
        with factory.begin() as s:
            db.ensure_agent(s, agent_id)
            for w in good:
                _, created = add_dream_world(s, agent_id, w.to_json(), origin="imported")
                imported += created
                existing += not created
    return {
        "imported": imported,
        "existing": existing,
        "errors": errors,
        "committed": not (atomic and errors),
    }
