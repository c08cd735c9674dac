"""The anthropic and openai clients against a local server speaking each wire format."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rsi_common.config import RoleModel, RoleModels, Settings
from rsi_common.errors import ModelAuthError, ModelBadRequest, ModelOutputError, ModelTransientError
from rsi_common.llm import ModelClient, ModelRequest, complete_json, make_client, role_client
from rsi_common.llm.anthropic import AnthropicClient
from rsi_common.llm.openai import OpenAIClient
from tests.support.wire_server import (
    ANTHROPIC,
    OPENAI,
    Reply,
    WireServer,
    anthropic_error,
    anthropic_message,
    anthropic_text,
    anthropic_tool_use,
    openai_completion,
    openai_error,
)

KEY = "test-key"
TOOLS = [{"name": "weather", "description": "Weather by city.", "input_schema": {"type": "object"}}]


@pytest.fixture
def srv() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


def settings_for(srv: WireServer, **kw: Any) -> Settings:
    base: dict[str, Any] = {
        "anthropic_api_key": KEY,
        "anthropic_base_url": srv.anthropic_base_url,
        "openai_api_key": KEY,
        "openai_base_url": srv.openai_base_url,
        "model_backoff_s": 0.0,
        "model_timeout_s": 10.0,
    }
    return Settings(**{**base, **kw})


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def req(messages: list[dict[str, Any]] | str, **kw: Any) -> ModelRequest:
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return ModelRequest(
        model=kw.pop("model", "m-1"), system=kw.pop("system", "Be helpful."), messages=messages, **kw
    )


# provider → (path, text body builder, error reply builder)
WIRE: dict[str, tuple[str, Callable[[str], dict[str, Any]], Callable[[int, str], Reply]]] = {
    "anthropic": (ANTHROPIC, anthropic_text, anthropic_error),
    "openai": (OPENAI, openai_completion, openai_error),
}


def client_for(provider: str, srv: WireServer, sleep: Sleeps | None = None, **kw: Any) -> ModelClient:
    cls = AnthropicClient if provider == "anthropic" else OpenAIClient
    return cls("m-1", settings_for(srv, **kw), sleep=sleep or Sleeps())


# --- Anthropic ----------------------------------------------------------------------------------


def test_anthropic_text_reply(srv: WireServer) -> None:
    srv.push(ANTHROPIC, Reply(body=anthropic_text("Hello!", usage={"input_tokens": 12, "output_tokens": 3})))
    client = make_client("anthropic", "claude-test", settings_for(srv))
    assert isinstance(client, ModelClient) and client.provider == "anthropic"
    resp = client.complete(req("Hi", model="claude-test", max_tokens=100, temperature=0.2))
    assert resp.content == [{"type": "text", "text": "Hello!"}]
    assert (resp.text, resp.stop_reason, resp.model) == ("Hello!", "end_turn", "claude-test")
    assert (
        resp.usage.input_tokens == 12
        and resp.usage.output_tokens == 3
        and resp.usage.reasoning_tokens is None
    )
    body = srv.bodies(ANTHROPIC)[0]
    assert body == {
        "model": "claude-test",
        "max_tokens": 100,
        "system": "Be helpful.",
        "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0.2,
    }
    headers = srv.received[0].headers
    assert KEY in (headers.get("x-api-key", "") + headers.get("authorization", ""))


def test_anthropic_tool_call_round_trip(srv: WireServer) -> None:
    srv.push(
        ANTHROPIC,
        Reply(body=anthropic_tool_use("weather", {"city": "Seoul"}, id="toolu_1", text="Let me check.")),
        Reply(body=anthropic_text("Sunny in Seoul.")),
    )
    client = client_for("anthropic", srv)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Seoul?"}]
    first = client.complete(req(messages, tools=TOOLS))
    assert first.stop_reason == "tool_use"
    assert first.tool_calls == [
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Seoul"}}
    ]
    messages += [
        first.message(),
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": False}
            ],
        },
    ]
    assert client.complete(req(messages, tools=TOOLS)).text == "Sunny in Seoul."
    sent = srv.bodies(ANTHROPIC)
    assert sent[0]["tools"] == [
        {"name": "weather", "description": "Weather by city.", "input_schema": {"type": "object"}}
    ]
    assert sent[1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Seoul"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
    ]


def test_anthropic_usage_cache_thinking_and_cache_points(srv: WireServer) -> None:
    usage = {
        "input_tokens": 5,
        "output_tokens": 40,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 20,
        "output_tokens_details": {"thinking_tokens": 30},
    }
    blocks = [{"type": "thinking", "thinking": "hmm", "signature": "sig"}, {"type": "text", "text": "ok"}]
    srv.push(ANTHROPIC, Reply(body=anthropic_message(blocks, usage=usage)))
    resp = client_for("anthropic", srv).complete(
        req(
            "Hi",
            tools=TOOLS,
            thinking_level="medium",
            temperature=0.7,
            cache_points=["system", "tools", "last_user"],
            output_schema={"type": "object"},
        )
    )
    assert resp.content[0] == {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    u = resp.usage
    assert (
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        u.reasoning_tokens,
    ) == (125, 40, 100, 20, 30)
    body = srv.bodies(ANTHROPIC)[0]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert "temperature" not in body
    assert body["system"][0] == {
        "type": "text",
        "text": "Be helpful.",
        "cache_control": {"type": "ephemeral"},
    }
    assert "JSON schema" in body["system"][1]["text"]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


# --- OpenAI -------------------------------------------------------------------------------------


def test_openai_text_reply(srv: WireServer) -> None:
    srv.push(
        OPENAI, Reply(body=openai_completion("Hello!", usage={"prompt_tokens": 12, "completion_tokens": 3}))
    )
    client = make_client("openai", "gpt-test", settings_for(srv))
    assert isinstance(client, ModelClient) and client.provider == "openai"
    resp = client.complete(
        req(
            "Hi",
            model="gpt-test",
            max_tokens=100,
            temperature=0.2,
            seed=1,
            output_schema={"type": "object"},
            thinking_level="low",
        )
    )
    assert (resp.text, resp.stop_reason, resp.model) == ("Hello!", "end_turn", "gpt-test")
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (12, 3)
    assert srv.bodies(OPENAI)[0] == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "Hi"}],
        "max_tokens": 100,
        "temperature": 0.2,
        "seed": 1,
        "reasoning_effort": "low",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": {"type": "object"}},
        },
    }
    assert srv.received[0].headers["authorization"] == f"Bearer {KEY}"


def test_openai_tool_call_round_trip(srv: WireServer) -> None:
    srv.push(
        OPENAI,
        Reply(body=openai_completion(None, tool_calls=[("call_1", "weather", {"city": "Seoul"})])),
        Reply(body=openai_completion("Sunny.")),
    )
    client = client_for("openai", srv)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Seoul?"}]
    first = client.complete(req(messages, tools=TOOLS))
    assert first.stop_reason == "tool_use"
    assert first.content == [
        {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Seoul"}}
    ]
    messages += [
        first.message(),
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": [{"type": "text", "text": "down"}],
                    "is_error": True,
                },
                {"type": "text", "text": "<turn_context>\nnote\n</turn_context>\n\n"},
            ],
        },
    ]
    assert client.complete(req(messages, tools=TOOLS)).text == "Sunny."
    sent = srv.bodies(OPENAI)
    assert sent[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Weather by city.",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert sent[1]["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Seoul"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Error: down"},
        {"role": "user", "content": "<turn_context>\nnote\n</turn_context>\n\n"},
    ]


def test_openai_usage_reasoning_and_cached(srv: WireServer) -> None:
    usage = {
        "prompt_tokens": 50,
        "completion_tokens": 9,
        "total_tokens": 59,
        "prompt_tokens_details": {"cached_tokens": 32},
        "completion_tokens_details": {"reasoning_tokens": 4},
    }
    body = openai_completion(
        "ok", usage=usage, finish_reason="length", extra_message={"reasoning_content": "think"}
    )
    srv.push(OPENAI, Reply(body=body))
    resp = client_for("openai", srv).complete(req("Hi"))
    assert resp.content == [{"type": "thinking", "thinking": "think"}, {"type": "text", "text": "ok"}]
    assert resp.stop_reason == "max_tokens"
    u = resp.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.reasoning_tokens) == (50, 9, 32, 4)


def test_openai_official_endpoint_uses_max_completion_tokens() -> None:
    from rsi_common.llm.openai import to_wire

    assert to_wire(req("Hi", max_tokens=7), "m", official=True)["max_completion_tokens"] == 7


# --- errors and retries (both providers) --------------------------------------------------------


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_rate_limit_then_success_is_retried(provider: str, srv: WireServer) -> None:
    path, text, error = WIRE[provider]
    srv.push(path, error(429, "slow down"), Reply(body=text("done")))
    sleeps = Sleeps()
    assert client_for(provider, srv, sleeps).complete(req("Hi")).text == "done"
    assert len(srv.bodies(path)) == 2 and sleeps.calls == []  # zero backoff


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_server_errors_retried_with_doubling_backoff_then_raised(provider: str, srv: WireServer) -> None:
    path, _, error = WIRE[provider]
    srv.push(path, *[error(500, "boom") for _ in range(4)])
    sleeps = Sleeps()
    with pytest.raises(ModelTransientError, match="500") as info:
        client_for(provider, srv, sleeps, model_backoff_s=1.0).complete(req("Hi"))
    assert "4 attempt" in str(info.value)
    assert len(srv.bodies(path)) == 4 and sleeps.calls == [1.0, 2.0, 4.0]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_500_then_success(provider: str, srv: WireServer) -> None:
    path, text, error = WIRE[provider]
    srv.push(path, error(503, "busy"), error(500, "boom"), Reply(body=text("done")))
    assert client_for(provider, srv).complete(req("Hi")).text == "done"


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_auth_error_is_clear_and_never_shows_the_key(provider: str, srv: WireServer) -> None:
    path, _, error = WIRE[provider]
    srv.push(path, error(401, f"invalid key {KEY}"))
    with pytest.raises(ModelAuthError) as info:
        client_for(provider, srv).complete(req("Hi"))
    message = str(info.value)
    assert provider in message and f"RSI_{provider.upper()}_API_KEY" in message and "401" in message
    assert KEY not in message and info.value.__cause__ is None
    assert len(srv.bodies(path)) == 1  # not retried


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("status", [400, 404, 422])
def test_bad_request_not_retried(provider: str, status: int, srv: WireServer) -> None:
    path, _, error = WIRE[provider]
    srv.push(path, error(status, "bad field"))
    with pytest.raises(ModelBadRequest, match="bad field"):
        client_for(provider, srv).complete(req("Hi"))
    assert len(srv.bodies(path)) == 1


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_complete_json_retries_unparseable_reply(provider: str, srv: WireServer) -> None:
    path, text, _ = WIRE[provider]
    srv.push(
        path,
        Reply(body=text("I think it passes.")),
        Reply(body=text('Verdict: {"pass": true, "reason": "ok"}')),
    )
    client = client_for(provider, srv)
    assert complete_json(client, system="Judge.", user="REQUEST:\nx", max_tokens=64) == {
        "pass": True,
        "reason": "ok",
    }
    second = srv.bodies(path)[1]
    assert "I think it passes." in str(second["messages"]) and "JSON object" in str(second["messages"])
    srv.push(path, *[Reply(body=text("no json")) for _ in range(2)])
    with pytest.raises(ModelOutputError, match="no JSON object after 2"):
        complete_json(client, system="Judge.", user="x", attempts=2)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_connection_error_is_transient(provider: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}" + ("/v1" if provider == "openai" else "")
    fields: dict[str, Any] = {
        f"{provider}_api_key": KEY,
        f"{provider}_base_url": url,
        "model_backoff_s": 0.0,
        "model_max_retries": 1,
    }
    settings = Settings(**fields)
    with pytest.raises(ModelTransientError, match="2 attempt"):
        make_client(provider, "m-1", settings, role="judge").complete(req("Hi"))
    # the kernel retries policy calls itself (docs/formats.md §7.2): one attempt per client call
    with pytest.raises(ModelTransientError, match="1 attempt"):
        make_client(provider, "m-1", settings, role="policy").complete(req("Hi"))


def test_timeout_is_transient(srv: WireServer) -> None:
    late = threading.Event()  # the reply is held until the client gave up, however slow the machine
    srv.push(ANTHROPIC, Reply(body=anthropic_text("late"), release=late))
    client = client_for("anthropic", srv, model_timeout_s=0.1, model_max_retries=0)
    try:
        with pytest.raises(ModelTransientError, match="Timeout"):
            client.complete(req("Hi"))
    finally:
        late.set()


def test_unscripted_request_is_a_clear_bad_request(srv: WireServer) -> None:
    with pytest.raises(ModelBadRequest, match="no scripted reply"):
        client_for("anthropic", srv).complete(req("Hi"))


# --- construction -------------------------------------------------------------------------------


def test_missing_key_is_an_auth_error_naming_the_setting() -> None:
    with pytest.raises(ModelAuthError, match="RSI_ANTHROPIC_API_KEY"):
        make_client("anthropic", "m", Settings())
    with pytest.raises(ModelAuthError, match="RSI_OPENAI_API_KEY"):
        make_client("openai", "m", Settings())


def test_local_server_needs_no_key(srv: WireServer) -> None:
    srv.push(OPENAI, Reply(body=openai_completion("hi")))
    client = make_client("openai", "llama", Settings(openai_base_url=srv.openai_base_url, model_backoff_s=0))
    assert client.complete(req("Hi")).text == "hi"


def test_role_client_overrides(srv: WireServer) -> None:
    roles = RoleModels(judge=RoleModel(provider="openai", model="gpt-judge", base_url=srv.openai_base_url))
    settings = Settings(roles=roles, model_backoff_s=0, openai_api_key=KEY)
    judge = role_client("judge", "sim", "sim-1", settings)
    assert (judge.provider, judge.model) == ("openai", "gpt-judge")
    srv.push(OPENAI, Reply(body=openai_completion("{}")))
    judge.complete(req("x"))
    assert srv.bodies(OPENAI)[0]["model"] == "m-1"  # the request's model wins over the client's
    critic = role_client("critic", "sim", "sim-1", settings)
    assert (critic.provider, critic.model) == ("sim", "sim-1")
