"""The cycle on SQLite: promotion lands in the harness lineage with its cycle id, a veto leaves π⁰,
no confirmation hook leaves it pending, an interrupted cycle resumes with identical results, and
the sweep resumes from stored episodes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.db import make_engine, session_factory, upgrade
from rsi_common.llm.base import ModelRequest, ModelResponse, Usage
from rsi_worker.dream.cycle import CycleConfig, current_harness, in_selection, run_cycle, split_worlds
from rsi_worker.dream.devagent import dev_client
from rsi_worker.dream.evaluate import EvalParams, InlineExecutor, MemoryStore, sweep
from rsi_worker.dream.policies import POLICY_FILE, builtin, harness_policy
from rsi_worker.dream.simtasks import SimTaskParams, generate_worlds

WIDE = """# name: wide
def plan_grid(ctx):
    b = ctx.hard_max_branch_count if ctx.trace_branch_count is None else ctx.trace_branch_count
    r = ctx.hard_max_refine_count if ctx.trace_refine_count is None else ctx.trace_refine_count
    return {"branch_count": b, "refine_count": min(3, r)}


def choose(view, beta):
    legal = view.legal()
    refine = [c for c in legal if c["attempt"] > 0]
    fresh = [c for c in legal if c["attempt"] == 0]
    return [c["id"] for c in (refine + fresh)[: view.width()]]
"""
SMALL = SimTaskParams(branches=5, refine=2)


class Scripted:
    """A development agent that always answers the same policy (stands in for a real model)."""

    provider, model = "script", "wide"

    def complete(self, request: ModelRequest) -> ModelResponse:
        text = f"```python\n{WIDE}```"
        return ModelResponse([{"type": "text", "text": text}], Usage(10, 10), "end_turn", "wide")


def _cfg(seed: int, **kw: Any) -> CycleConfig:
    return CycleConfig(
        seed=seed,
        min_worlds=4,
        task_params=SMALL,
        revisions=1,
        params=EvalParams(betas=(0.2, 0.6, 1.0)),
        **kw,
    )


@pytest.fixture
def factory(tmp_path: Any) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(f"sqlite:///{tmp_path}/dream.db")
    upgrade(engine)
    yield session_factory(engine)
    engine.dispose()


def test_promoted_policy_lands_in_the_lineage_with_its_cycle_id(factory: sessionmaker[Session]) -> None:
    out = run_cycle(factory, "agent-p", Scripted(), _cfg(5))
    assert out["status"] == "promoted", out.get("confirm")
    assert out["m_star"] == 1 and out["V"][1] >= out["V"][0]
    c = out["confirm"]
    assert c["floor_ok"] and c["cost_ok"] and c["delta_S"] > 0
    with factory() as s:
        rows = db.lineage(s, "agent-p")
        h = current_harness(s, "agent-p")
    assert rows[-1].run_id == out["cycle_id"] and rows[-1].version == out["promoted_version"] == h.version
    entry = h.manifest.exploration_policy
    assert entry is not None and entry["cycle_id"] == out["cycle_id"] and entry["file"] == POLICY_FILE
    assert entry["default_beta"] == out["next_beta"]["beta"]
    assert harness_policy(h).source == WIDE and not harness_policy(h).trusted


def test_vetoed_policy_leaves_pi0_current(factory: sessionmaker[Session]) -> None:
    out = run_cycle(factory, "agent-v", Scripted(), _cfg(2))
    assert out["status"] == "vetoed" and out["m_star"] == 1
    assert not (out["confirm"]["floor_ok"] and out["confirm"]["cost_ok"])
    with factory() as s:
        assert db.get_agent(s, "agent-v").current_version is None
        assert db.lineage(s, "agent-v") == []
        assert harness_policy(current_harness(s, "agent-v")).name == "fixed_width"


def test_no_confirmation_hook_is_pending_and_interrupted_cycle_resumes_identically(
    factory: sessionmaker[Session],
) -> None:
    cfg = _cfg(0, confirm=False)
    for phase in ("deploy", "develop", "select", "sweep"):
        part = run_cycle(factory, "agent-r", Scripted(), CycleConfig(**{**cfg.__dict__, "stop_after": phase}))
        assert part["status"] == "running" and part["phase"] != "done"
    # resumed with other options: the cycle keeps the configuration it started with
    resumed = run_cycle(factory, "agent-r", Scripted(), CycleConfig(seed=7, confirm=True))
    other = make_engine("sqlite://")
    upgrade(other)
    whole = run_cycle(session_factory(other), "agent-r", Scripted(), cfg)
    assert resumed["status"] == whole["status"] == "pending_confirmation"
    for key in ("V", "m_star", "sweep", "next_beta"):
        assert resumed[key] == whole[key]
    with factory() as s:
        assert db.get_agent(s, "agent-r").current_version is None


def test_sim_development_agent_repairs_and_selection_never_loses(factory: sessionmaker[Session]) -> None:
    out = run_cycle(
        factory,
        "agent-s",
        dev_client("sim", "sim-1"),
        CycleConfig(seed=0, min_worlds=4, task_params=SMALL, params=EvalParams(betas=(0.6,))),
    )
    assert out["V"][out["m_star"]] >= out["V"][0]
    assert len(out["versions"]) + len(out["failures"]) == 4
    assert out["status"] in ("kept", "vetoed", "promoted")


def test_split_is_by_task_hash() -> None:
    worlds = generate_worlds(0, 10, SMALL)
    dev, sel = split_worlds(worlds)
    assert {w.task_id for w in sel} == {w.task_id for w in worlds if in_selection(w.task_id)}
    assert not {w.task_id for w in dev} & {w.task_id for w in sel}


def test_sweep_interrupted_mid_way_resumes_with_identical_results() -> None:
    worlds = generate_worlds(2, 3, SMALL)
    params = EvalParams()
    code = builtin("parallel_refine")
    whole = sweep(code, "s", worlds, params, InlineExecutor())

    class Killed(InlineExecutor):
        calls = 0

        def run(self, *a: Any) -> list[dict[str, Any]]:
            Killed.calls += 1
            if Killed.calls == 3:
                raise SystemExit("worker killed")
            return super().run(*a)

    store = MemoryStore()
    with pytest.raises(SystemExit):
        sweep(code, "s", worlds, params, Killed(), store, chunk=4)
    assert len(store.load("s")) == 8
    again = sweep(code, "s", worlds, params, InlineExecutor(), store, chunk=4)
    assert again == whole
    assert again.points[0].beta == 0.0 and len(again.points) == 6 and again.world_auc


def test_sim_development_agent_reads_its_sections() -> None:
    from rsi_worker.dream.devagent import extract_code, revision_prompt
    from rsi_worker.dream.sandbox import check_source

    client = dev_client("sim", "sim-1")
    firsts = [extract_code(client.complete(revision_prompt(r, [], None)).text) for r in range(12)]
    assert any(t.startswith("import os") for t in firsts)  # a slip the sandbox refuses...
    tried: list[dict[str, str]] = []
    for r in range(4):
        text = extract_code(client.complete(revision_prompt(r, tried, "line 1: import of 'os'")).text)
        check_source(text)  # ...never repeated on repair
        tried.append({"name": text.splitlines()[0].removeprefix("# name: ")})
    assert len({t["name"] for t in tried}) == 4  # each revision a variant not tried yet
