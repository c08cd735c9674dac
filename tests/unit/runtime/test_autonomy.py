"""Goals and autonomous mode on the inline driver with the sim model (docs/runtime/goals.md):
R11.6 — ``finish after 3`` → ``goal_complete``; ``max_turns 2`` → ``budget:turns``; the check's
reason in the next input; ``stall`` → ``stalled``; ``admin_console`` → taint and ``integrity``."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db import WorldRow
from rsi_common.db.runtime_models import EventRow, GoalRow, MessageRow
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import InvalidInput
from rsi_common.kernel.testing import ScriptedModel, text_response, tool_response
from rsi_common.llm import ModelClient
from rsi_common.llm.sim import SimClient
from rsi_common.replay import PolicySpec, replay_world
from rsi_common.runtime import turns
from rsi_common.runtime.checks import CheckContext, sim_done
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.tick import tick
from rsi_common.runtime.tree import AgentProfile
from rsi_common.runtime.turns import TurnEnv, drain
from rsi_common.world import TurnWorld

CONT = "Continue toward the goal. (continuation {i} of {m})"


def _env(engine: Engine, fake_redis: Any, tmp_path: Any, model: ModelClient) -> Any:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    client = RsiClient(settings, engine=engine, redis=fake_redis, dispatcher=RecordingDispatcher())
    queue: deque[tuple[str, str]] = deque()
    turn_env = TurnEnv(client, RuntimeParams(), model, lambda a, s: queue.append((a, s)))
    rc = RuntimeClient(client, params=turn_env.params, wake=turn_env.wake, actor="operator:test")
    rc.register("A", AgentProfile())
    return turn_env, queue, rc, client


@pytest.fixture
def sim(engine: Engine, fake_redis: Any, tmp_path: Any) -> Any:
    turn_env, queue, rc, client = _env(engine, fake_redis, tmp_path, SimClient())
    yield turn_env, queue, rc
    client.close()


def client_harness(turn_env: TurnEnv) -> Any:
    return turn_env.client.current_harness("A")


def _worlds(rc: RuntimeClient, agent: str = "A") -> dict[str, dict[str, Any]]:
    with rc.sessions() as s:
        return {w.io_id: w.world for w in s.execute(sa.select(WorldRow).where(
            WorldRow.agent_id == agent).order_by(WorldRow.seq)).scalars()}


def _events(rc: RuntimeClient, kind: str) -> list[dict[str, Any]]:
    with rc.sessions() as s:
        return [e.detail for e in s.execute(sa.select(EventRow).where(EventRow.kind == kind).order_by(
            EventRow.id)).scalars()]


def test_finish_after_3_completes_the_goal_through_goal_complete(sim: Any) -> None:
    turn_env, queue, rc = sim
    rc.set_goal("A", "write the report; finish after 3 turns", 50_000, "sim.done")
    rc.start_autonomy("A", check="sim.done")
    ran = [o for o in drain(turn_env, queue) if o.outcome == "ran"]
    assert [o.answer for o in ran] == ["progress 0", "progress 1", "progress 2", "done"]
    loop, goal = rc.autonomy("A"), rc.goal("A")
    assert loop is not None and goal is not None
    assert (loop["status"], loop["reason"], loop["turns"]) == ("completed", "goal_complete", 4)
    assert goal["status"] == "completed" and goal["reason"] == "done"
    worlds = _worlds(rc)
    # the goal note is in every recorded world (replay reads plan.turn_notes), with its usage so far
    notes = [w["plan"]["turn_notes"] for w in worlds.values()]
    assert all(len(n) == 1 and n[0].startswith("Goal: write the report; finish after 3 turns (tokens used ")
               for n in notes)
    assert notes[0][0].endswith("(tokens used 0 of 50000)") and not notes[1][0].endswith("used 0 of 50000)")
    last = worlds["main:4"]
    calls = last["tools"]["calls"]
    assert [c["name"] for c in calls] == ["goal_complete"] and '"complete":true' in calls[0]["content"]
    # replay (H0, the sim) re-reads the note from the world: same answers, goal_complete from the record
    for io, answer in (("main:1", "progress 0"), ("main:4", "done")):
        again = replay_world(TurnWorld(io, worlds[io]), client_harness(turn_env), PolicySpec("sim", "sim-1"),
                             llm_factory=lambda _p: SimClient())
        assert (again.error, again.answer, again.off_support) == ("", answer, 0)
    # goal usage = Σ c(τ) of its turns, updated in each turn's commit
    assert goal["tokens_used"] == sum(w["outcome"]["policy_tokens"] for w in worlds.values())
    assert [e["to"] for e in _events(rc, "autonomy") if e["to"] != "continue"] == ["running", "completed"]
    # the goal tools are gone once the goal is complete
    rc.start_turn("A", "hello")
    drain(turn_env, queue)
    assert "goal_complete" not in {t["name"] for t in _worlds(rc)["main:5"]["tools"]["defs"]}


def test_max_turns_2_stops_on_budget_turns_and_the_reason_reaches_the_next_input(sim: Any) -> None:
    turn_env, queue, rc = sim
    rc.set_goal("A", "plan the trip; finish after 3 turns", 50_000, None)
    rc.start_autonomy("A", {"max_turns": 2}, "sim.done")
    ran = [o for o in drain(turn_env, queue) if o.outcome == "ran"]
    assert [o.answer for o in ran] == ["progress 0", "progress 1"]
    loop = rc.autonomy("A")
    assert loop is not None and (loop["status"], loop["reason"]) == ("stopped", "budget:turns")
    second = _worlds(rc)["main:2"]["input"]
    assert second == CONT.format(i=1, m=2) + "\n" + "not done yet: the last answer does not say done"
    with rc.sessions() as s:  # no continuation is left behind
        assert s.execute(sa.select(sa.func.count()).select_from(MessageRow).where(
            MessageRow.consumed_io.is_(None))).scalar_one() == 0


def test_a_stalling_agent_is_stopped_after_three_identical_tool_less_turns(sim: Any) -> None:
    turn_env, queue, rc = sim
    rc.set_goal("A", "stall forever", 50_000, None)
    rc.start_autonomy("A")
    ran = [o for o in drain(turn_env, queue) if o.outcome == "ran"]
    assert len(ran) == 3 and len({o.answer for o in ran}) == 1
    loop = rc.autonomy("A")
    assert loop is not None and (loop["status"], loop["reason"]) == ("stopped", "stalled")


def test_admin_console_taints_the_world_and_stops_on_integrity(engine: Engine, fake_redis: Any,
                                                                tmp_path: Any) -> None:
    model = ScriptedModel([tool_response("admin_console", {"cmd": "give all"}), text_response("done")],
                          provider="sim", model="sim-1")
    turn_env, queue, rc, client = _env(engine, fake_redis, tmp_path, model)
    try:
        rc.start_autonomy("A", check="sim.done")
        ran = [o for o in drain(turn_env, queue) if o.outcome == "ran"]
        assert [o.answer for o in ran] == ["done"]  # says done, but a check never passes without integrity
        loop = rc.autonomy("A")
        assert loop is not None and (loop["status"], loop["reason"]) == ("stopped", "integrity")
        with rc.sessions() as s:
            w = s.execute(sa.select(WorldRow).where(WorldRow.io_id == "main:1")).scalar_one()
            assert w.tainted and "admin_console" in (w.taint_reason or "")
        assert [e["io"] for e in _events(rc, "taint")] == ["main:1"]
    finally:
        client.close()


def test_goal_complete_failure_reason_is_the_tool_result_and_the_goal_stays_active(
        engine: Engine, fake_redis: Any, tmp_path: Any) -> None:
    model = ScriptedModel([tool_response("goal_complete", {"summary": "almost there"}), text_response("ok")],
                          provider="sim", model="sim-1")
    turn_env, queue, rc, client = _env(engine, fake_redis, tmp_path, model)
    try:
        rc.set_goal("A", "ship it", 10_000, "sim.done")
        rc.start_turn("A", "go")
        drain(turn_env, queue)
        call = _worlds(rc)["main:1"]["tools"]["calls"][0]
        goal = rc.goal("A")
        assert goal is not None and goal["status"] == "active" and goal["tokens_used"] > 0
        assert json.loads(call["content"]) == {"complete": False, "goal": goal["id"],
                                               "reason": "not done yet: the last answer does not say done"}
    finally:
        client.close()


def test_a_spent_goal_budget_is_budget_exhausted_and_bounds_the_reservation(sim: Any) -> None:
    turn_env, queue, rc = sim
    rc.set_goal("A", "stall here", 5, None)
    rc.start_turn("A", "go")
    out = drain(turn_env, queue)
    assert [o.status for o in out if o.outcome == "ran"] == ["blocked"]  # grant = the 5 tokens left
    goal = rc.goal("A")
    assert goal is not None and goal["status"] == "budget_exhausted" and goal["tokens_used"] >= 5


def test_goal_and_autonomy_inputs_are_validated(sim: Any) -> None:
    _, _, rc = sim
    for bad, field in [(("", 10, None), "objective"), (("x", 0, None), "token_budget"),
                       (("x", True, None), "token_budget"), (("x", 10, "nope"), "check")]:
        with pytest.raises(InvalidInput, match=field):
            rc.set_goal("A", *bad)
    rc.set_goal("A", "one", 10)
    with pytest.raises(InvalidInput, match="goal_exists"):
        rc.set_goal("A", "two", 10)
    with pytest.raises(InvalidInput, match="status"):
        rc.update_goal("A", status="completed")
    assert rc.update_goal("A", status="paused")["status"] == "paused"
    assert rc.update_goal("A", status="active", token_budget=20)["token_budget"] == 20
    assert rc.update_goal("A", status="cancelled")["status"] == "cancelled"
    with pytest.raises(InvalidInput, match="max_turns"):
        rc.start_autonomy("A", {"max_turns": 0})
    with pytest.raises(InvalidInput, match="unknown keys: max_beers"):
        rc.start_autonomy("A", {"max_beers": 1})
    with pytest.raises(InvalidInput, match="max_usd"):
        rc.start_autonomy("A", {"max_usd": float("nan")})
    rc.start_autonomy("A")
    with pytest.raises(InvalidInput, match="autonomy_running"):
        rc.start_autonomy("A")
    assert rc.stop_autonomy("A")["reason"] == "operator"
    with rc.sessions() as s:  # the withdrawn first message never runs a turn
        assert s.execute(sa.select(sa.func.count()).select_from(MessageRow)).scalar_one() == 0
    rc.register("H", AgentProfile(runs_on="host"))
    with pytest.raises(InvalidInput, match="runs on the host"):
        rc.start_autonomy("H")


def test_paused_goal_offers_no_goal_tools_and_no_note(sim: Any) -> None:
    turn_env, queue, rc = sim
    rc.set_goal("A", "finish after 1 turns", 10_000)
    rc.update_goal("A", status="paused")
    rc.start_turn("A", "hello")
    drain(turn_env, queue)
    world = _worlds(rc)["main:1"]
    assert world["plan"]["turn_notes"] == []
    assert not {"goal_get", "goal_complete"} & {t["name"] for t in world["tools"]["defs"]}
    with turn_env.factory() as s:
        assert s.execute(sa.select(GoalRow.tokens_used)).scalar_one() == 0


def test_sim_done_check() -> None:
    ctx = CheckContext("A", "main", "g", "All done.")
    assert sim_done(ctx).ok
    assert not sim_done(CheckContext("A", "main", "g", "undone work")).passed
    bad = sim_done(CheckContext("A", "main", "g", "done", ("admin_console",)))
    assert not bad.integrity_ok and not bad.ok


def test_caps_stop_the_loop_after_a_turn_and_before_one(sim: Any) -> None:
    turn_env, queue, rc = sim
    rc.set_caps("A", {"tree_turns_per_day": 1})
    rc.start_autonomy("A")
    assert [o.outcome for o in drain(turn_env, queue)] == ["ran"]
    loop = rc.autonomy("A")
    assert loop is not None and (loop["status"], loop["reason"]) == ("stopped", "cap:turns")
    rc.set_caps("A", {"tree_tokens_per_day": 1})  # the day's tokens are spent: the next turn is refused
    rc.start_autonomy("A")
    assert [o.outcome for o in drain(turn_env, queue)] == ["capped"]
    loop = rc.autonomy("A")
    assert loop is not None
    assert (loop["status"], loop["reason"], loop["turns"]) == ("stopped", "cap:tokens", 0)


def test_the_tick_reruns_a_step_lost_between_the_commit_and_the_step(
        sim: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    turn_env, queue, rc = sim
    rc.set_goal("A", "sort the files; finish after 1 turns", 50_000, "sim.done")
    rc.start_autonomy("A", check="sim.done")
    with monkeypatch.context() as m:  # the worker dies after the first turn's commit, before its step
        m.setattr(turns, "after_logical_turn", lambda env, sl, result, out: out)
        assert [o.answer for o in drain(turn_env, queue)] == ["progress 0"]
    loop = rc.autonomy("A")
    assert loop is not None and (loop["status"], loop["turns"]) == ("running", 0)
    assert tick(turn_env).loop_steps == 1 and tick(turn_env).loop_steps == 0  # once
    ran = [o for o in drain(turn_env, queue) if o.outcome == "ran"]
    assert [o.answer for o in ran] == ["done"]
    loop = rc.autonomy("A")
    assert loop is not None
    assert (loop["status"], loop["reason"], loop["turns"]) == ("completed", "goal_complete", 2)


def test_a_check_factory_that_cannot_load_fails_the_check_and_never_the_turn() -> None:
    from rsi_common.runtime.checks import run_check, validate_check

    ctx = CheckContext("A", "main", "g", "done")
    verdict = run_check("no_such_module_x:checks", "sim.done", ctx)
    assert not verdict.passed and "could not be loaded (ModuleNotFoundError)" in verdict.reason
    with pytest.raises(InvalidInput, match="RSI_CHECK_FACTORY could not be loaded"):
        validate_check("no_such_module_x:checks", "sim.done")
    assert run_check(None, "sim.done", ctx).ok


def test_sim_goal_rules() -> None:
    from rsi_common.llm.base import ModelRequest
    from rsi_common.llm.sim.core import Turn
    from rsi_common.llm.sim.goals import STALL_ANSWER, goal_reply

    def reply(objective: str, text: str) -> Any:
        note = f"Notes for this turn:\n- Goal: {objective} (tokens used 3 of 10)"
        request = ModelRequest(model="sim-1", system="", messages=[{"role": "user", "content": text}])
        return goal_reply(request, Turn(input=text, context=note))

    def text(t: str) -> list[dict[str, str]]:
        return [{"type": "text", "text": t}]

    assert reply("stall on purpose", "x") == reply("stalled work", "y") == text(STALL_ANSWER)
    assert reply("install it", "x") is None and reply("anything", "x") is None
    assert reply("go; finish after 2 turns", CONT.format(i=1, m=5)) == text("progress 1")
    assert reply("go; finish after 2 turns", CONT.format(i=2, m=5)) == text("done")  # no goal_complete here
