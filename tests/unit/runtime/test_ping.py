"""A message loop between a parent and its child ends at the hop limit (docs/runtime/messages.md#checks),
run through real turns of the inline driver."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db.runtime_models import MessageRow
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.kernel.testing import ScriptedModel
from rsi_common.llm import ModelRequest, ModelResponse, Usage
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.turns import TurnEnv, drain

CHILD = "You are the echo child."
CATALOG = {"echo": {"description": "echoes", "tools": [], "max_iterations": 4, "instructions": CHILD}}
RESULTS: list[dict[str, Any]] = []


def _respond(content: list[dict[str, Any]]) -> ModelResponse:
    stop = "tool_use" if content[0]["type"] == "tool_use" else "end_turn"
    return ModelResponse(content=content, usage=Usage(input_tokens=10, output_tokens=2), stop_reason=stop,
                         model="sim-1")


def _policy(request: ModelRequest) -> ModelResponse:
    """``go`` → spawn an echo child; a ``ping`` → send ``ping`` back; after a tool result → ``ack``."""
    last = request.messages[-1]["content"]
    if isinstance(last, list):
        RESULTS.append(json.loads(last[0]["content"]))
        return _respond([{"type": "text", "text": "ack"}])
    text = str(last).splitlines()[-1]
    if text == "go":
        return _respond([{"type": "tool_use", "id": "s1", "name": "subagent_spawn",
                          "input": {"spec": "echo", "input": "ping"}}])
    to = "parent" if CHILD in request.system else "child:echo-1"
    return _respond([{"type": "tool_use", "id": "m1", "name": "message_send",
                      "input": {"to": to, "text": "ping"}}])


@pytest.fixture
def env(engine: Engine, fake_redis: Any, tmp_path: Any) -> Any:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    client = RsiClient(settings, engine=engine, redis=fake_redis, dispatcher=RecordingDispatcher())
    queue: deque[tuple[str, str]] = deque()
    model = ScriptedModel([_policy], repeat_last=True, provider="sim", model="sim-1")
    params = RuntimeParams(msg_refill_ms=1)  # the bucket never binds: the hop limit must stop the loop
    yield TurnEnv(client, params, model, lambda a, s: queue.append((a, s))), queue, client
    client.close()


def test_a_ping_loop_stops_at_the_hop_limit(env: Any) -> None:
    turn_env, queue, client = env
    RESULTS.clear()
    rc = RuntimeClient(client, params=turn_env.params, wake=turn_env.wake)
    rc.register("P", {"subagents": CATALOG})
    rc.start_turn("P", "go")
    outcomes = drain(turn_env, queue, max_turns=100)
    assert len(outcomes) < 100
    with turn_env.factory() as s:
        hops = [m.hops for m in s.execute(sa.select(MessageRow).where(MessageRow.kind == "message",
                                                                        MessageRow.sender.is_not(None))
                                          .order_by(MessageRow.seq)).scalars()]
    assert hops == list(range(1, turn_env.params.msg_max_hops + 1))
    sent = [r for r in RESULTS if "receipts" in r]
    refused = [r for r in RESULTS if "error" in r]
    assert len(sent) == 8 and refused and all(r == {"error": "hop_limit", "detail": "hop 9 exceeds 8"}
                                                for r in refused)
    assert outcomes[-1].io.endswith(":5")  # the child's fifth turn met the limit; nothing runs after it
