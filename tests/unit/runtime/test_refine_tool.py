"""The agent's ``refine_request`` through a real inline turn with the sim policy (``refine: <f>``, R9.4)
and the host API's refinement methods (docs/runtime/refine.md)."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.coord import pending_refine_key
from rsi_common.db.runtime_models import EventRow
from rsi_common.dispatch import TASK_CONSOLIDATE, RecordingDispatcher
from rsi_common.errors import InvalidInput
from rsi_common.llm import make_client
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.turns import TurnEnv, drain


@pytest.fixture
def env(engine: Engine, fake_redis: Any, tmp_path: Any) -> Any:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    dispatcher = RecordingDispatcher()
    client = RsiClient(settings, engine=engine, redis=fake_redis, dispatcher=dispatcher)
    queue: deque[tuple[str, str]] = deque()
    model = make_client("sim", "sim-1", settings, role="policy")
    turn_env = TurnEnv(client, RuntimeParams(), model, lambda a, s: queue.append((a, s)))
    yield turn_env, queue, RuntimeClient(client, params=turn_env.params, wake=turn_env.wake), dispatcher
    client.close()


def _tool_results(turn_env: TurnEnv, agent: str) -> list[dict[str, Any]]:
    from rsi_common.db import load_latest_worlds

    with turn_env.factory() as s:
        worlds = load_latest_worlds(s, agent, 10)
        calls = [c for w in reversed(worlds) for c in (w.world or {}).get("tools", {}).get("calls", [])]
    return [json.loads(c["content"] if isinstance(c["content"], str) else c["content"][0]["text"])
            for c in calls if c["name"] == "refine_request"]


def test_the_agent_asks_once_then_the_cooldown_refuses(env: Any) -> None:
    turn_env, queue, rc, dispatcher = env
    rc.register("bot", {"refine": True})
    rc.start_turn("bot", "refine: present comparisons as tables")
    drain(turn_env, queue, max_turns=10)
    rc.start_turn("bot", "refine: again please")
    drain(turn_env, queue, max_turns=10)
    first, second = _tool_results(turn_env, "bot")
    assert first["scheduled"] is True and second == {
        "scheduled": False, "reason": "cooldown: a refine was requested recently"}
    with turn_env.factory() as s:
        [event] = s.execute(sa.select(EventRow).where(EventRow.kind == "refine_request")).scalars()
    assert event.actor == "bot" and event.detail["focus"] == "present comparisons as tables"
    assert event.detail["criteria"] == [] and event.detail["requested_by"] == "bot"
    io = "refine:" + event.detail["id"]
    queued = [t.args[1] for t in dispatcher.tasks(TASK_CONSOLIDATE)]
    waiting = turn_env.client.redis.get(pending_refine_key("bot"))
    assert io in queued or (waiting is not None and waiting.decode() == io)


def test_an_agent_without_the_flag_is_not_offered_the_tool(env: Any) -> None:
    turn_env, queue, rc, _ = env
    rc.register("mute", {})
    rc.start_turn("mute", "refine: tables")
    drain(turn_env, queue, max_turns=10)
    assert _tool_results(turn_env, "mute") == []
    assert rc.refine_request("mute", "tables") == {"scheduled": False,
                                                    "reason": "refine is not enabled for this agent"}


def test_the_host_api_refine_taint_revoke_audit(env: Any) -> None:
    turn_env, queue, rc, _ = env
    rc.register("ops-bot", {})
    rc.start_turn("ops-bot", "Compare laptops: use search query=laptops")
    drain(turn_env, queue, max_turns=10)
    out = rc.refine("ops-bot", "", ["present options as a table"], "alice")
    assert out["scheduled"] is True and out["request"].startswith("rf_")
    with pytest.raises(InvalidInput, match=r"^criteria"):
        rc.refine("ops-bot", "", ["x"] * 6, "alice")
    from rsi_common.db import load_latest_worlds

    with turn_env.factory() as s:
        io = load_latest_worlds(s, "ops-bot", 1)[0].io_id
    assert rc.taint("ops-bot", io, "operator review")["tainted"] == 1
    with pytest.raises(InvalidInput, match=r"^reason"):
        rc.taint("ops-bot", io, "")
    assert rc.audit("ops-bot") == []  # no version adopted yet
    with pytest.raises(Exception, match="version"):
        rc.revoke("ops-bot", "sha256:" + "0" * 64, "nope")
