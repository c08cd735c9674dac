"""The sim streams in deterministic chunks, and a streamed kernel turn on it records the same world
as the same turn without streaming (replay unchanged)."""

from __future__ import annotations

import json
from typing import Any

from rsi_common.config import SimConfig
from rsi_common.harness import h0
from rsi_common.kernel import TextDelta, ToolCall, ToolResultEvent, TurnEvent, TurnPlan, run_turn
from rsi_common.llm import ModelRequest
from rsi_common.llm.sim import SimClient
from rsi_common.llm.sim.client import ARG_PIECE_CHARS
from rsi_common.llm.streaming import ResponseChunk, TextChunk, ToolCallAssembler, ToolCallChunk, stream_call
from rsi_common.replay import PolicySpec, replay_world
from rsi_common.world import TurnWorld, new_world_id
from tests.unit.kernel.helpers import CLOCK, NO_RETRY, sales_tools

TOOLS = [{"name": "get_sales", "description": "Sales.", "input_schema": {"type": "object", "properties": {
    "region": {"type": "string"}, "quarter": {"type": "string"}}}}]


def request(text: str, **kw: Any) -> ModelRequest:
    return ModelRequest(model="", system="", messages=[{"role": "user", "content": text}], **kw)


def test_chunks_are_deterministic_and_add_up_to_the_plain_answer() -> None:
    sim = SimClient("sim-1", SimConfig())
    req = request("Compare the two laptops, please, in detail")
    first, second = list(sim.stream(req)), list(sim.stream(req))
    assert first == second
    texts = [c.text for c in first if isinstance(c, TextChunk)]
    assert len(texts) > 5 and all(t.strip() for t in texts)
    assert isinstance(first[-1], ResponseChunk) and first[-1].response == sim.complete(req)
    assert "".join(texts) == first[-1].response.text


def test_tool_calls_stream_in_pieces_that_assemble() -> None:
    sim = SimClient("sim-1", SimConfig())
    req = request("use get_sales region=north quarter=Q3", tools=TOOLS)
    chunks = list(sim.stream(req))
    pieces = [c for c in chunks if isinstance(c, ToolCallChunk)]
    assert len(pieces) > 2 and all(len(p.arguments) <= ARG_PIECE_CHARS for p in pieces)
    assembler = ToolCallAssembler()
    for p in pieces:
        assembler.add(p)
    [call] = assembler.done()
    final = chunks[-1]
    assert isinstance(final, ResponseChunk)
    assert json.loads(call["arguments"]) == final.response.tool_calls[0]["input"] == {"region": "north",
                                                                                     "quarter": "Q3"}
    assert call["name"] == "get_sales" and call["id"] == final.response.tool_calls[0]["id"]


def test_a_client_without_stream_is_streamed_as_whole_blocks() -> None:
    class Plain:
        provider, model = "plain", "p"

        def __init__(self) -> None:
            self.sim = SimClient()

        def complete(self, req: ModelRequest) -> Any:
            return self.sim.complete(req)

    chunks = list(stream_call(Plain(), request("hello there")))  # type: ignore[arg-type]
    assert [type(c) for c in chunks] == [TextChunk, ResponseChunk]


def plan() -> TurnPlan:
    return TurnPlan(input="Sales please: use get_sales region=north, then use get_weather city=Oslo",
                    agent_id="a1", io_id="io-1", interaction_id="c1", clock=CLOCK, tools=sales_tools())


def test_a_streamed_turn_records_the_same_world_and_replays_the_same() -> None:
    quiet = run_turn(plan(), None, SimClient(), retry=NO_RETRY)
    events: list[TurnEvent] = []
    loud = run_turn(plan(), None, SimClient(), retry=NO_RETRY, on_event=events.append)
    assert quiet.world is not None and loud.world is not None and quiet.steps == loud.steps == 3
    assert json.dumps(quiet.world, sort_keys=True) == json.dumps(loud.world, sort_keys=True)
    assert (quiet.answer, quiet.usage, quiet.trajectory["policy_tokens"]) == (
        loud.answer, loud.usage, loud.trajectory["policy_tokens"])
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [(c.name, c.step) for c in calls] == [("get_sales", 0), ("get_weather", 1)]
    assert [r.id for r in results] == [c.id for c in calls] and not any(r.is_error for r in results)
    assert "".join(e.text for e in events if isinstance(e, TextDelta) and e.step == 2) == loud.answer
    replays = [replay_world(TurnWorld(new_world_id(), w), h0(), PolicySpec("sim", "sim-1"),
                            llm_factory=lambda _p: SimClient(), retry=NO_RETRY)
               for w in (quiet.world, loud.world)]
    assert replays[0].error == "" and replays[0].answer == replays[1].answer == quiet.answer
    assert replays[0].policy_tokens == replays[1].policy_tokens


def test_a_failing_event_callback_never_fails_the_turn() -> None:
    def broken(event: TurnEvent) -> None:
        raise RuntimeError("display crashed")

    result = run_turn(plan(), None, SimClient(), retry=NO_RETRY, on_event=broken)
    assert result.status == "completed" and result.world is not None
