"""Streaming through the official SDKs against the local wire-format server (SSE): text, tool-call
deltas split across chunks, usage counted once, 429/5xx before and during the stream, disconnects,
cancellation, and the world of a streamed turn equal to the same turn run without streaming."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rsi_common.config import Settings
from rsi_common.errors import ModelTransientError
from rsi_common.kernel import (
    RetryPolicy,
    StepReset,
    TextDelta,
    ToolCall,
    ToolDef,
    TurnEvent,
    TurnPlan,
    run_turn,
)
from rsi_common.llm import ModelClient, ModelRequest, make_client
from rsi_common.llm.streaming import ResponseChunk, TextChunk, ThinkingChunk, ToolCallAssembler, ToolCallChunk
from tests.support.wire_server import (
    ANTHROPIC,
    OPENAI,
    Reply,
    WireServer,
    anthropic_error,
    anthropic_message,
    anthropic_stream,
    openai_completion,
    openai_error,
    openai_stream,
)

KEY = "test-key"
NO_RETRY = RetryPolicy(retries=2, backoff_s=0.0)
TEXT = "Rain in Oslo, 7 degrees; take a coat."
ARGS = {"city": "Oslo", "units": "metric", "days": [1, 2, 3]}
TOOL = [{"name": "weather", "description": "Weather by city.", "input_schema": {"type": "object"}}]


@pytest.fixture
def srv() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


def settings_for(srv: WireServer) -> Settings:
    return Settings(anthropic_api_key=KEY, anthropic_base_url=srv.anthropic_base_url, openai_api_key=KEY,
                    openai_base_url=srv.openai_base_url, model_backoff_s=0.0, model_timeout_s=10.0)


def client(srv: WireServer, provider: str) -> ModelClient:
    return make_client(provider, "m-test", settings_for(srv))


def request(text: str = "weather in Oslo?", **kw: Any) -> ModelRequest:
    return ModelRequest(model="", system="be brief", messages=[{"role": "user", "content": text}], **kw)


def plain(provider: str, *, tool: bool) -> Reply:
    if provider == "anthropic":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": TEXT}]
        if tool:
            blocks.append({"type": "tool_use", "id": "toolu_1", "name": "weather", "input": ARGS})
        return Reply(body=anthropic_message(blocks))
    return Reply(body=openai_completion(TEXT, tool_calls=[("call_1", "weather", ARGS)] if tool else None))


def streamed(provider: str, *, tool: bool, **kw: Any) -> Reply:
    if provider == "anthropic":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": TEXT}]
        if tool:
            blocks.append({"type": "tool_use", "id": "toolu_1", "name": "weather", "input": ARGS})
        return Reply(events=anthropic_stream(blocks), **kw)
    calls = [("call_1", "weather", ARGS)] if tool else None
    return Reply(events=openai_stream(TEXT, tool_calls=calls), **kw)


PATH = {"anthropic": ANTHROPIC, "openai": OPENAI}
PROVIDERS = ("anthropic", "openai")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_streams_in_pieces_and_the_response_equals_the_plain_one(srv: WireServer, provider: str) -> None:
    srv.push(PATH[provider], plain(provider, tool=False), streamed(provider, tool=False))
    c = client(srv, provider)
    whole = c.complete(request())
    chunks = list(c.stream(request()))  # type: ignore[attr-defined]
    texts = [ch.text for ch in chunks if isinstance(ch, TextChunk)]
    assert len(texts) > 5 and "".join(texts) == TEXT
    assert isinstance(chunks[-1], ResponseChunk) and sum(isinstance(ch, ResponseChunk) for ch in chunks) == 1
    assert chunks[-1].response == whole
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (10, 5)
    body = srv.bodies(PATH[provider])[-1]
    assert body["stream"] is True
    if provider == "openai":
        assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_tool_call_deltas_split_across_chunks_are_assembled(srv: WireServer, provider: str) -> None:
    srv.push(PATH[provider], plain(provider, tool=True), streamed(provider, tool=True))
    c = client(srv, provider)
    whole = c.complete(request(tools=TOOL))
    chunks = list(c.stream(request(tools=TOOL)))  # type: ignore[attr-defined]
    pieces = [ch for ch in chunks if isinstance(ch, ToolCallChunk)]
    assert len(pieces) > 3, "the arguments arrive in several chunks"
    assert pieces[0].name == "weather" and pieces[0].id and all(not p.id for p in pieces[1:])
    assembler = ToolCallAssembler()
    for p in pieces:
        assembler.add(p)
    [call] = assembler.done()
    assert json.loads(call["arguments"]) == ARGS
    final = chunks[-1]
    assert isinstance(final, ResponseChunk)
    assert final.response == whole
    assert final.response.tool_calls[0]["input"] == ARGS and final.response.stop_reason == "tool_use"


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [429, 500, 503])
def test_an_error_status_before_the_stream_is_transient(srv: WireServer, provider: str, status: int) -> None:
    error = anthropic_error(status, "busy") if provider == "anthropic" else openai_error(status, "busy")
    srv.push(PATH[provider], error)
    with pytest.raises(ModelTransientError, match=str(status)):
        list(client(srv, provider).stream(request()))  # type: ignore[attr-defined]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("cut", ["eof", "reset"])
def test_a_disconnect_mid_stream_is_transient(srv: WireServer, provider: str, cut: str) -> None:
    srv.push(PATH[provider], streamed(provider, tool=True, cut_after=6, cut=cut))
    seen: list[Any] = []
    with pytest.raises(ModelTransientError):
        for chunk in client(srv, provider).stream(request(tools=TOOL)):  # type: ignore[attr-defined]
            seen.append(chunk)
    assert seen and not any(isinstance(ch, ResponseChunk) for ch in seen)


def test_an_error_event_mid_stream_is_transient(srv: WireServer) -> None:
    events = anthropic_stream([{"type": "text", "text": TEXT}])
    broken = (*events[:4], ("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                    "message": "Overloaded"}}))
    srv.push(ANTHROPIC, Reply(events=broken))
    with pytest.raises(ModelTransientError, match="Overloaded"):
        list(client(srv, "anthropic").stream(request()))  # type: ignore[attr-defined]


def test_an_error_object_mid_stream_is_transient_openai(srv: WireServer) -> None:
    events = openai_stream(TEXT)
    broken = (*events[:4], (None, {"error": {"message": "upstream overloaded", "type": "server_error"}}))
    srv.push(OPENAI, Reply(events=broken))
    with pytest.raises(ModelTransientError, match="upstream overloaded"):
        list(client(srv, "openai").stream(request()))  # type: ignore[attr-defined]


# --- the kernel on a streaming client -------------------------------------------------------------


def weather(args: dict[str, Any]) -> str:
    return f"city: {args.get('city')}\nrain: yes"


def plan() -> TurnPlan:
    return TurnPlan(input="weather in Oslo?", agent_id="a1", io_id="io-1", interaction_id="c1",
                    clock=1_700_000_000.0,
                    tools=[ToolDef("weather", "Weather by city.", {"type": "object"}, executor=weather)])


def final_reply(provider: str, *, stream: bool) -> Reply:
    if provider == "anthropic":
        blocks = [{"type": "text", "text": "Take a coat."}]
        return Reply(events=anthropic_stream(blocks)) if stream else Reply(body=anthropic_message(blocks))
    text = "Take a coat."
    return Reply(events=openai_stream(text)) if stream else Reply(body=openai_completion(text))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_streamed_turn_records_the_same_world_as_a_plain_one(srv: WireServer, provider: str) -> None:
    srv.push(PATH[provider], plain(provider, tool=True), final_reply(provider, stream=False))
    quiet = run_turn(plan(), None, client(srv, provider), retry=NO_RETRY)
    srv.push(PATH[provider], streamed(provider, tool=True), final_reply(provider, stream=True))
    events: list[TurnEvent] = []
    loud = run_turn(plan(), None, client(srv, provider), retry=NO_RETRY, on_event=events.append)
    assert quiet.status == loud.status == "completed"
    assert quiet.world is not None and loud.world is not None
    assert json.dumps(quiet.world, sort_keys=True) == json.dumps(loud.world, sort_keys=True)
    assert quiet.answer == loud.answer == "Take a coat."
    assert quiet.usage == loud.usage and loud.usage["input_tokens"] == 20, "usage counted once per call"
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ToolCall") < kinds.index("ToolResultEvent") < len(kinds) - 1
    [call] = [e for e in events if isinstance(e, ToolCall)]
    assert call.input == ARGS and call.step == 0
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == TEXT + "Take a coat."


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_broken_midway_is_voided_and_retried(srv: WireServer, provider: str) -> None:
    srv.push(PATH[provider], streamed(provider, tool=False, cut_after=5, cut="reset"),
             streamed(provider, tool=False))
    events: list[TurnEvent] = []
    result = run_turn(plan(), None, client(srv, provider), retry=NO_RETRY, on_event=events.append)
    assert result.status == "completed" and result.answer == TEXT
    resets = [i for i, e in enumerate(events) if isinstance(e, StepReset)]
    assert len(resets) == 1, "the partial text of the failed attempt is voided once"
    after = "".join(e.text for e in events[resets[0]:] if isinstance(e, TextDelta))
    assert after == TEXT
    assert [bool(r["error"]) for r in result.ledger] == [True, False]
    assert result.usage["calls"] == 1 and result.usage["input_tokens"] == 10


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_429_before_the_stream_is_retried_without_a_reset(srv: WireServer, provider: str) -> None:
    error = anthropic_error(429, "slow down") if provider == "anthropic" else openai_error(429, "slow down")
    srv.push(PATH[provider], error, streamed(provider, tool=False))
    events: list[TurnEvent] = []
    result = run_turn(plan(), None, client(srv, provider), retry=NO_RETRY, on_event=events.append)
    assert result.status == "completed" and not any(isinstance(e, StepReset) for e in events)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_cancelled_stream_ends_the_turn_cleanly(srv: WireServer, provider: str) -> None:
    release = threading.Event()
    srv.push(PATH[provider], streamed(provider, tool=False, pause_after=4, release=release))
    stop = threading.Event()

    def on_event(event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            stop.set()  # the host's reader went away after the first piece

    result = run_turn(plan(), None, client(srv, provider), retry=NO_RETRY, on_event=on_event,
                      cancelled=stop.is_set)
    release.set()
    assert (result.status, result.termination_reason) == ("cancelled", "CANCELLED")
    assert len(srv.bodies(PATH[provider])) == 1, "no retry after a cancel"
    assert result.usage["calls"] == 0


def test_a_preset_speaks_the_wire_format_plain_and_streamed(srv: WireServer) -> None:
    """The ``vllm`` preset pointed at the wire-format server (every preset uses this client)."""
    srv.push(OPENAI, plain("openai", tool=True), streamed("openai", tool=True),
             openai_error(503, "loading model"))
    vllm = make_client("vllm", "qwen-test", settings_for(srv), base_url=srv.openai_base_url)
    assert vllm.provider == "vllm"
    whole = vllm.complete(request(tools=TOOL))
    chunks = list(vllm.stream(request(tools=TOOL)))  # type: ignore[attr-defined]
    assert isinstance(chunks[-1], ResponseChunk) and chunks[-1].response == whole
    with pytest.raises(ModelTransientError, match="vllm: HTTP 503"):
        list(vllm.stream(request()))  # type: ignore[attr-defined]
    assert [b["model"] for b in srv.bodies(OPENAI)] == ["qwen-test"] * 3
    assert "max_tokens" in srv.bodies(OPENAI)[0], "a custom base URL gets the compatible parameter name"


def test_streamed_reasoning_is_a_thinking_block_like_the_plain_one(srv: WireServer) -> None:
    events = openai_stream(TEXT)
    delta = {"reasoning_content": "compare first"}
    thought = (None, {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0,
                      "model": "gpt-test", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    srv.push(OPENAI, Reply(body=openai_completion(TEXT, extra_message=delta)),
             Reply(events=(events[0], thought, *events[1:])))
    c = client(srv, "openai")
    whole = c.complete(request())
    chunks = list(c.stream(request()))  # type: ignore[attr-defined]
    assert [ch.text for ch in chunks if isinstance(ch, ThinkingChunk)] == ["compare first"]
    assert isinstance(chunks[-1], ResponseChunk) and chunks[-1].response == whole
    assert whole.content[0] == {"type": "thinking", "thinking": "compare first"}
