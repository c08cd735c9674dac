"""Trial order, early stop by mode, re-judging and promotion (docs/algorithm/evolve.md)."""

from __future__ import annotations

import random
from typing import Any

import fakeredis
import pytest

from rsi_common.coord import Coordinator
from rsi_common.db import HarnessRow, RunRow, ensure_agent, freeze, get_agent
from rsi_common.errors import AgentConflict, InvalidInput
from rsi_common.math import Candidate, EvalResult, RRSIParams, TaskResult, aggregate
from rsi_worker.consolidate.evaluate import StopContext
from rsi_worker.evolve.config import EvolveConfig
from rsi_worker.evolve.engine import run_inline
from rsi_worker.evolve.evaluation import EvalJob, evaluate, slot_order
from rsi_worker.evolve.judgement import NeedsReevaluation, decision_record, judge, readjudicate
from rsi_worker.evolve.ops import promote, readjudicate_round
from tests.unit.evolve.conftest import EvolveStack

CHECKS = {f"t{i}": [{"name": "a"}, {"name": "b"}] for i in range(6)}


def test_trial_order_is_shuffled_with_the_seed() -> None:
    slots = [(t, j) for t in ["x", "y", "z"] for j in range(2)]
    expected = list(slots)
    random.Random(7).shuffle(expected)
    assert slot_order(["x", "y", "z"], 2, 7) == expected != slots


def _job(stack: EvolveStack, name: str, cand: str) -> EvalJob:
    return EvalJob(name, 0, cand, tuple(CHECKS), CHECKS, 2, 7)


def _zero(task: str, seed: int) -> dict[str, Any]:
    return {"status": "ok", "reward": 0.0, "weight": 2, "result": {"passed": 0}}


def test_early_stop_in_production_only(stack: EvolveStack) -> None:
    name = stack.create()
    stop = StopContext(S_star=0.9, delta=0.05, S_t=0.9)
    stopped = evaluate(stack.store, _job(stack, name, "A"), _zero, stop=stop)  # production: a stop context
    ran = [r for r in stopped if r["status"] == "ok"]
    assert 0 < len(ran) < 12 and len([r for r in stopped if r["status"] == "cancelled"]) == 12 - len(ran)
    full = evaluate(stack.store, _job(stack, name, "B"), _zero, stop=None)  # paper: never stopped
    assert len(full) == 12 and all(r["status"] == "ok" for r in full)
    # a stored evaluation is never run again
    assert (
        evaluate(stack.store, _job(stack, name, "B"), lambda t, s: pytest.fail("re-ran"), stop=None) == full
    )


def test_paper_mode_config_has_no_early_stop_and_zero_eps() -> None:
    paper, prod = EvolveConfig(mode="paper").mode_config, EvolveConfig().mode_config
    assert (paper.early_stop, paper.float_eps, paper.select_tie) == (False, 0.0, "paper")
    assert (prod.early_stop, prod.float_eps, prod.select_tie) == (True, 1e-12, "production")
    with pytest.raises(InvalidInput, match=r"config\.smoke_n"):
        EvolveConfig(smoke_n=-1)
    with pytest.raises(InvalidInput, match="unknown key"):
        EvolveConfig.from_json({"nope": 1})


def _ev(job: str, rewards: list[float]) -> EvalResult:
    return aggregate({f"t{i}": TaskResult((r,), (2.0,)) for i, r in enumerate(rewards)}, 1, job)


def test_readjudicate_raises_needs_reevaluation_when_an_early_stop_no_longer_holds() -> None:
    config = EvolveConfig(params=RRSIParams(k=1))
    inc = _ev("inc", [1.0, 1.0, 1.0, 0.5])
    # A stopped after 3 tasks at 0: A=0, B=6, R=2 → Ŝ_max = 0.25 < S★ − δ with δ = 0.05
    early = {"A": 0, "B": 6, "R": 2, "delta_S": 0.25 - inc.S}
    ev_a = EvalResult(
        job="rA",
        k=1,
        per_task={f"t{i}": TaskResult((0.0,), (2.0,)) for i in range(3)},
        S=0.25,
        C=None,
        n_expected=3,
        missing=0,
        extra={"early_stopped": True, "early_stop": early},
    )
    cands = [Candidate("A", (), ev_a)]
    winner, decided = judge(config, config.params, cands, inc, inc.S, 0.05, {}, ["prompt"])
    record = decision_record(
        0, config, config.params, inc.S, 0.05, ["prompt"], {}, inc, cands, decided, winner
    )
    assert record["candidates"][0]["early_stop"] == early
    again = readjudicate(config, record, {"records": []}, {}, delta=0.5)
    assert again[0] is None  # still holds: 0.25 < 0.875 − 0.5
    with pytest.raises(NeedsReevaluation) as exc:
        readjudicate(config, record, {"records": []}, {}, delta=0.7)
    assert exc.value.variants == ["A"]
    with pytest.raises(InvalidInput, match="unknown weight"):
        readjudicate(config, record, {"records": []}, {}, weights={"gamma": 1.0})


def test_readjudicate_refuses_when_later_rounds_exist_and_applies_a_new_delta(stack: EvolveStack) -> None:
    name = stack.create(params={"T": 2})
    run_inline(stack.env, name)
    with pytest.raises(InvalidInput, match="later rounds exist"):
        readjudicate_round(stack.env, name, 0, delta=0.5)
    new = readjudicate_round(stack.env, name, 1, delta=0.9)
    assert new["delta"] == 0.9 and new["original"]["t"] == 1 and new["overrides"]["delta"] == 0.9
    rnd = stack.store.round(name, 1)
    assert rnd is not None and rnd["decision"]["delta"] == 0.9


def test_promote_is_a_fenced_adoption_with_lineage(stack: EvolveStack) -> None:
    name = stack.create(params={"T": 1})
    run_inline(stack.env, name)
    state = stack.store.run(name)[4]
    assert state is not None and state["incumbent"]
    coord = Coordinator(fakeredis.FakeRedis(server=fakeredis.FakeServer()), lease_s=30)
    info = promote(stack.env, coord, name, "agent-1")
    assert info["version"] == state["incumbent"]["version"] and info["parent"] is None
    with stack.sessions() as s:
        assert get_agent(s, "agent-1").current_version == info["version"]
        run = s.get(RunRow, info["run_id"])
        assert run is not None and (run.kind, run.status) == (f"promote:{name}", "adopted")
        row = s.query(HarnessRow).filter_by(agent_id="agent-1", version=info["version"]).one()
        assert row.run_id == info["run_id"] and (row.summary or {}).get("evolve") == name
    assert coord.lease_holder("agent-1") is None  # the lease was released
    held = coord.try_begin("agent-2", "io-x")
    assert held is not None
    with pytest.raises(AgentConflict, match="busy") as busy:
        promote(stack.env, coord, name, "agent-2")
    assert busy.value.slug == "agent-busy"
    coord.finish(held)
    with stack.sessions.begin() as s:
        ensure_agent(s, "agent-3")
        freeze(s, "agent-3")
    with pytest.raises(AgentConflict, match="frozen") as frozen:  # was: "the agent moved meanwhile"
        promote(stack.env, coord, name, "agent-3")
    assert frozen.value.slug == "agent-frozen" and coord.lease_holder("agent-3") is None
    with stack.sessions() as s:
        assert get_agent(s, "agent-3").current_version is None  # nothing written


def test_early_stop_then_reevaluate_measures_in_full(tmp_path: Any) -> None:
    from rsi_common.llm import ModelClient, ModelRequest, ModelResponse, Usage
    from rsi_worker.evolve.ops import reevaluate_round
    from rsi_worker.evolve.suite import validate_suite

    def broken(role: str, client: ModelClient) -> ModelClient:
        class Broken:  # a candidate's harness names the table trait: the policy then answers nothing useful
            provider, model = client.provider, client.model

            def complete(self, request: ModelRequest) -> ModelResponse:
                if "table" in request.system:
                    return ModelResponse([{"type": "text", "text": "no"}], Usage(1, 1), "end_turn", "sim-1")
                return client.complete(request)

        return Broken() if role == "policy" else client

    stack = EvolveStack(tmp_path, wrap=broken)
    checks = [
        {"kind": "contains", "text": "Aero"},
        {"kind": "answer_criteria", "criterion": "A better answer does this: show it as a table"},
    ]
    stack.store.save_suite(
        validate_suite(
            {
                "name": "es",
                "tasks": [
                    {
                        "id": f"t{i}",
                        "request": f"Compare: Aero {i} 1299 EUR, Zen {i} 999 EUR",
                        "checks": checks,
                    }
                    for i in range(4)
                ],
            }
        )
    )
    stack.store.create("r", "es", EvolveConfig(params=RRSIParams(T=1, k=2), trial_parallel=1, smoke_n=0))
    run_inline(stack.env, "r")
    rnd = stack.store.round("r", 0)
    assert rnd is not None
    stopped = [c for c in rnd["decision"]["candidates"] if c["early_stop"]]
    assert stopped and all(c["decision"]["reason_code"] == "floor" for c in stopped)
    assert any(r["status"] == "cancelled" for r in stack.store.trials("r", 0))
    with pytest.raises(NeedsReevaluation):
        readjudicate_round(stack.env, "r", 0, delta=0.6)
    new = reevaluate_round(stack.env, "r", 0, delta=0.6)
    assert all(c["early_stop"] is None and c["ev"]["S"] == 0.0 for c in new["candidates"])
    assert not [r for r in stack.store.trials("r", 0) if r["status"] == "cancelled"]
    assert new["delta"] == 0.6 and new["winner"] is None
    stack.engine.dispose()
