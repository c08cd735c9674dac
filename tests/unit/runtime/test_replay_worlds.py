"""Replay of runtime worlds (docs/runtime/subagents.md#worlds-and-replay): the inline delegation to
three children replays byte-identically per slice under H0, an unrecorded spawn or wait is
off-support (``NO_RECORD``), and no replay spawns, sends, schedules or charges anything."""

from __future__ import annotations

import json
import re
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db import WorldRow
from rsi_common.db.runtime_models import MessageRow, SpendRow, SubagentRow
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.harness import h0
from rsi_common.kernel.testing import RecordingClient, ScriptedModel, text_response, tool_response
from rsi_common.replay import NO_RECORD, PolicySpec, ReplayResult, cut_transcript, replay_world
from rsi_common.runtime.turns import TurnEnv, drain
from rsi_common.world import TurnWorld, validate_world, world_bytes
from tests.support.runtime_policy import policy
from tests.unit.runtime.test_turns import _start

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "world" / "rsi-world-1-runtime.json"
SIM = PolicySpec("sim", "sim-1")


@pytest.fixture
def env(engine: Engine, fake_redis: Any, tmp_path: Any) -> Any:
    """test_turns' inline runtime: the scripted delegating policy, the inline wake queue."""
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    client = RsiClient(settings, engine=engine, redis=fake_redis, dispatcher=RecordingDispatcher())
    queue: deque[tuple[str, str]] = deque()
    yield TurnEnv(client, RuntimeParams(), _policy_model(), lambda a, s: queue.append((a, s))), queue, client
    client.close()


def _delegate(turn_env: TurnEnv, queue: deque[tuple[str, str]]) -> tuple[list[str], dict[str, Any]]:
    """Run test_turns' scenario; returns the ios of the slices that ran (in order) and the worlds."""
    _start(turn_env, queue, "topic 0; topic 1; topic 2")
    ran = [o.io for o in drain(turn_env, queue) if o.outcome == "ran"]
    with turn_env.factory() as s:
        worlds = {w.io_id: w.world for w in s.execute(sa.select(WorldRow)).scalars()}
    assert len(ran) == 5 and set(ran) == set(worlds)
    return ran, worlds


def _side_effects(turn_env: TurnEnv, queue: deque[tuple[str, str]]) -> Any:
    """Everything a replay must leave alone: runtime rows, every Redis key and value, the wake queue."""
    r = turn_env.client.redis
    with turn_env.factory() as s:
        rows = [s.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
                for t in (SubagentRow, MessageRow, SpendRow, WorldRow)]
    keys = sorted(r.keys("*"))
    return rows, [(k, r.dump(k)) for k in keys], list(queue), len(turn_env.model.requests)


def _replay(world: dict[str, Any], io: str, model: Any) -> tuple[ReplayResult, RecordingClient]:
    rec = RecordingClient(model)
    result = replay_world(TurnWorld(io, world), h0(), SIM, llm_factory=lambda _p: rec, sleep=lambda _s: None)
    return result, rec


def _policy_model() -> ScriptedModel:
    return ScriptedModel([policy], repeat_last=True, provider="sim", model="sim-1")


def test_each_slice_and_child_world_replays_byte_identically_and_changes_nothing(env: Any) -> None:
    turn_env, queue, _ = env
    ran, worlds = _delegate(turn_env, queue)
    live = turn_env.model.requests
    assert len(live) == 6  # slice 1: spawn ×3, wait; 3 children; slice 2: summary
    before = _side_effects(turn_env, queue)
    replayed: list[str] = []
    for io in ran:
        world = worlds[io]
        result, rec = _replay(world, io, _policy_model())
        outcome = world["outcome"]
        assert (result.error, result.off_support) == ("", 0), (io, result.off_support_calls)
        assert (result.status, result.termination_reason, result.answer, result.steps) == (
            outcome["status"], outcome["termination_reason"], outcome["final_text"], outcome["steps"]), io
        assert result.policy_tokens == outcome["policy_tokens"]
        assert result.answered == len(world["tools"]["calls"])
        # the replay's transcript equals the recorded one (canonical JSON), after the recorded history
        assert json.dumps(result.transcript, sort_keys=True) == json.dumps(
            cut_transcript(outcome["transcript"]), sort_keys=True), io
        replayed += rec.canonical_requests()
    # per slice, in run order, the replayed requests are the live requests byte for byte
    assert replayed == [r.canonical() for r in live]
    assert [worlds[io]["runtime"]["slice"] for io in ran] == [1, 1, 1, 1, 2]
    assert worlds[ran[0]]["outcome"]["status"] == "suspended"  # slice 1 yields on the wait, replay too
    assert _side_effects(turn_env, queue) == before  # nothing spawned, sent, scheduled or charged


def test_an_unrecorded_spawn_or_wait_is_off_support_and_spawns_nothing(env: Any) -> None:
    turn_env, queue, _ = env
    ran, worlds = _delegate(turn_env, queue)
    before = _side_effects(turn_env, queue)
    spawn = {"spec": "researcher", "input": "topic 9"}
    wait = {"handles": ["sa_000000000000000000000009"]}
    model = ScriptedModel([tool_response("subagent_spawn", spawn, tool_use_id="x1"),
                           tool_response("subagent_wait", wait, tool_use_id="x2"),
                           text_response("nothing known")], repeat_last=True, provider="sim",
                          model="sim-1")
    result, rec = _replay(worlds["main:1"], "main:1", model)
    assert (result.error, result.status, result.answer) == ("", "completed", "nothing known")
    assert result.off_support == 2 and result.answered == 0
    assert result.off_support_calls == [{"name": "subagent_spawn", "input": spawn},
                                        {"name": "subagent_wait", "input": wait}]
    results = [b for m in rec.requests[2].messages if isinstance(m["content"], list) for b in m["content"]
               if b.get("type") == "tool_result"]
    assert len(rec.requests) == 4  # H0 reviews a completion that follows a failed tool once
    assert [(b["content"], b["is_error"]) for b in results] == [(NO_RECORD, True)] * 2
    # a wait on recorded handles but with other arguments is off-support too, on the resumed slice
    other = ScriptedModel([tool_response("subagent_wait", {"handles": [], "mode": "any"}),
                           text_response("done")], repeat_last=True, provider="sim", model="sim-1")
    result, _ = _replay(worlds[ran[-1]], ran[-1], other)
    assert result.off_support_calls == [{"name": "subagent_wait", "input": {"handles": [], "mode": "any"}}]
    assert _side_effects(turn_env, queue) == before


_IDS = re.compile(r"\b(sa|m)_[0-9a-f]{24}\b")


def normalized(world: dict[str, Any]) -> dict[str, Any]:
    """A world of the scenario with its random ids numbered in order of appearance and a fixed time
    (the only parts of the inline scenario that vary between runs)."""
    seen: dict[str, str] = {}

    def number(m: re.Match[str]) -> str:
        return seen.setdefault(m.group(0), f"{m.group(1)}_{len(seen) + 1:024d}")

    out: dict[str, Any] = json.loads(_IDS.sub(number, json.dumps(world, ensure_ascii=False)))
    out.update(created_at="2026-01-01T00:00:00Z", clock=1767225600.0)
    out["bytes"] = world_bytes(out)
    return out


def test_golden_runtime_world_is_what_the_scenario_records(env: Any) -> None:
    """tests/golden/world/rsi-world-1-runtime.json is the resumed slice of the delegation, with
    ``runtime``; it validates unchanged and equals a fresh recording (ids and time normalized)."""
    turn_env, queue, _ = env
    ran, worlds = _delegate(turn_env, queue)
    golden = json.loads(GOLDEN.read_text("utf-8"))
    assert validate_world(golden) == golden and golden["bytes"] == world_bytes(golden)
    assert golden["runtime"]["slice"] == 2 and golden["runtime"]["request"] is not None
    assert normalized(worlds[ran[-1]]) == golden
