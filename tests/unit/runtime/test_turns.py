"""Turns of registered agents, inline (docs/runtime/README.md#turns): delegation to three children
with yield and resume, worlds with a ``runtime`` block, spend to the root, caps."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db.runtime_models import SessionRow, SpendRow, SubagentRow
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import InvalidInput
from rsi_common.kernel.testing import ScriptedModel
from rsi_common.runtime.caps import resolve_caps
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.messages import Sender, send
from rsi_common.runtime.tree import AgentProfile, get_runtime, register
from rsi_common.runtime.turns import TurnEnv, drain
from tests.support.runtime_policy import CATALOG, LEAD, policy


@pytest.fixture
def env(engine: Engine, fake_redis: Any, tmp_path: Any) -> Any:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    client = RsiClient(settings, engine=engine, redis=fake_redis, dispatcher=RecordingDispatcher())
    queue: deque[tuple[str, str]] = deque()
    model = ScriptedModel([policy], repeat_last=True, provider="sim", model="sim-1")
    yield TurnEnv(client, RuntimeParams(), model, lambda a, s: queue.append((a, s))), queue, client
    client.close()


def _start(env: TurnEnv, queue: deque[tuple[str, str]], text: str, **profile: Any) -> None:
    with env.factory.begin() as s:
        register(s, "P", AgentProfile(system_parts=(("lead", LEAD),), subagents=CATALOG, **profile))
        send(s, env.client.redis, env.params, resolve_caps(env.params), Sender(None, io="op1"), "P", text)
    queue.append(("P", "main"))


def test_delegation_to_three_children_yields_and_resumes(env: Any) -> None:
    turn_env, queue, client = env
    _start(turn_env, queue, "topic 0; topic 1; topic 2")
    outcomes = drain(turn_env, queue)
    ran = [(o.io, o.status) for o in outcomes if o.outcome == "ran"]
    assert ran[0] == ("main:1", "suspended")
    assert ran[-1][0] == "main:1+2" and ran[-1][1] == "completed"
    final = [o for o in outcomes if o.outcome == "ran"][-1]
    assert final.answer == "summary: finding on topic 0; finding on topic 1; finding on topic 2"
    with turn_env.factory() as s:
        handles = list(s.execute(sa.select(SubagentRow).order_by(SubagentRow.name)).scalars())
        assert [(h.name, h.status, h.child_agent) for h in handles] == [
            (f"researcher-{i + 1}", "completed", "P.researcher") for i in range(3)]
        sessions = {r.session: r for r in s.execute(sa.select(SessionRow).where(
            SessionRow.agent_id == "P.researcher")).scalars()}
        assert set(sessions) == {h.id for h in handles}
        main = s.execute(sa.select(SessionRow).where(SessionRow.agent_id == "P")).scalar_one()
        assert (main.turns, main.slice, main.pending) == (1, 0, None)
        worlds = {w.io_id: w.world for w in s.execute(sa.select(__import__("rsi_common.db", fromlist=[
            "WorldRow"]).WorldRow)).scalars()}
        spend = list(s.execute(sa.select(SpendRow)).scalars())
    # three child sessions, each world with a runtime block
    child_worlds = [w for io, w in worlds.items() if io.startswith("sa_")]
    assert len(child_worlds) == 3
    assert all(w["runtime"]["parent"] == "P" and w["runtime"]["depth"] == 1 and w["runtime"]["slice"] == 1
               for w in child_worlds)
    # the last slice's input holds the wait's tool_result block, no [interrupted] results
    last = worlds["main:1+2"]
    assert last["runtime"]["slice"] == 2 and last["runtime"]["request"] is not None
    assert [b["tool_use_id"] for b in last["input"]] == ["w1"]
    assert "[interrupted]" not in json.dumps(last)
    # spend: every charge to the root, once per key, Σ tokens = Σ c(τ) of the worlds
    assert {c.root_id for c in spend} == {"P"} and len({c.key for c in spend}) == len(spend)
    assert sum(c.tokens for c in spend) == sum(w["outcome"]["policy_tokens"] for w in worlds.values())
    assert sum(c.spawns for c in spend) == 3 and sum(c.turns for c in spend) == 4
    # consolidation of the children goes to the consolidate queue, never to agents
    assert {c.queue for c in client.dispatcher.calls} <= {"consolidate"}


def test_at_the_cap_a_turn_blocks_after_one_call_and_the_next_is_refused(env: Any) -> None:
    turn_env, queue, _ = env
    _start(turn_env, queue, "topic 0; topic 1; topic 2")
    with turn_env.factory.begin() as s:
        get_runtime(s, "P").caps = {"tree_tokens_per_day": 1}
    (first,) = drain(turn_env, queue)
    assert (first.outcome, first.status) == ("ran", "blocked")  # granted 1 token: stops after one call
    assert len(turn_env.model.requests) == 1
    with turn_env.factory.begin() as s:
        send(s, turn_env.client.redis, turn_env.params, resolve_caps(turn_env.params), Sender(None, io="op2"),
             "P", "again")
    queue.append(("P", "main"))
    assert [(o.outcome, o.answer) for o in drain(turn_env, queue)] == [("capped", "cap_exceeded:tokens")]
    assert len(turn_env.model.requests) == 1
    with turn_env.factory() as s:
        spent = s.execute(sa.select(sa.func.sum(SpendRow.tokens))).scalar_one()
    assert spent == 120  # the one call's c(τ): the overshoot is at most one call


def test_the_host_api_runs_a_tree_and_shows_it_with_its_spend(env: Any) -> None:
    turn_env, queue, client = env
    rc = RuntimeClient(client, params=turn_env.params, wake=turn_env.wake, actor="operator:ann")
    with pytest.raises(InvalidInput, match="unknown key 'tree_tokens'"):
        rc.register("P", {"system_parts": [["lead", LEAD]]}, caps={"tree_tokens": 5})
    with pytest.raises(InvalidInput, match="instructions are required"):
        rc.register("P", {"subagents": {"researcher": {"description": "x"}}})
    rc.register("P", {"system_parts": [["lead", LEAD]], "subagents": CATALOG})
    (receipt,) = rc.start_turn("P", "topic a; topic b")
    assert rc.inbox("P") == [{"id": receipt["id"], "kind": "message", "sender": None,
                              "relationship": "operator", "text": "topic a; topic b", "hops": 0}]
    drain(turn_env, queue)
    shown = rc.tree("P")
    assert shown["tree"]["lifecycle"] == "idle" and shown["spend"]["spawns"] == 2
    (child,) = shown["tree"]["children"]
    assert (child["agent"], child["depth"], child["spec"]) == ("P.researcher", 1, "researcher")
    assert [h["status"] for h in shown["tree"]["handles"]] == ["completed", "completed"]
    spend = rc.spend("P")
    assert spend["spent"]["turns"] == 3 and spend["caps"]["tokens"] == 5_000_000
    assert rc.spend("P.researcher")["tokens"] == 240
    with pytest.raises(InvalidInput, match="caps are set on a root"):
        rc.set_caps("P.researcher", {"tree_tokens_per_day": 10})
    assert rc.set_caps("P", {"tree_tokens_per_day": 10})["caps"] == {"tree_tokens_per_day": 10}
    assert rc.delete("P") == [] and rc.lifecycle("P.researcher") == "deleted"
    with pytest.raises(InvalidInput, match="not failed"):
        rc.restore("P")
