"""The model interface: request JSON, helpers, complete_json, client factories, retry policy."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsi_common.config import RoleModel, RoleModels, Settings
from rsi_common.errors import (
    InvalidInput,
    ModelAuthError,
    ModelBadRequest,
    ModelError,
    ModelOutputError,
    ModelTransientError,
    SettingsError,
)
from rsi_common.llm import (
    ModelRequest,
    ModelResponse,
    Usage,
    complete_json,
    make_client,
    parse_json_object,
    role_client,
    text_of,
    tool_uses,
)
from rsi_common.llm.anthropic import thinking_config
from rsi_common.llm.retry import RetryPolicy, call_with_retries, error_for_status


def test_request_json_and_canonical() -> None:
    r = ModelRequest(model="m", system="s", messages=[{"role": "user", "content": "é"}], seed=2)
    obj = r.to_json()
    assert list(obj) == [
        "model",
        "system",
        "messages",
        "tools",
        "max_tokens",
        "temperature",
        "thinking_level",
        "cache_points",
        "output_schema",
        "seed",
    ]
    assert obj["max_tokens"] == 8192 and obj["tools"] == [] and obj["cache_points"] == []
    without = r.canonical()
    assert '"seed"' not in without and "é" in without and ", " not in without
    assert json.loads(r.canonical(with_seed=True))["seed"] == 2
    assert without == json.dumps(
        {k: v for k, v in obj.items() if k != "seed"},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    # replays differ from live turns only in the seed
    assert (
        ModelRequest(model="m", system="s", messages=[{"role": "user", "content": "é"}]).canonical()
        == without
    )
    obj["messages"].append({})  # to_json is a copy
    assert len(r.messages) == 1


def test_response_helpers() -> None:
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "x"},
        {"type": "text", "text": "a"},
        {"type": "tool_use", "id": "1", "name": "t", "input": {}},
        {"type": "text", "text": "b"},
    ]
    resp = ModelResponse(content=content, usage=Usage(3, 4), stop_reason="tool_use", model="m")
    assert resp.text == "ab" == text_of(content) == text_of(resp)
    assert resp.tool_calls == [content[2]] == tool_uses(resp)
    assert text_of("plain") == "plain" and tool_uses("plain") == []
    msg = resp.message()
    assert msg["role"] == "assistant" and msg["content"] == content and msg["content"] is not content
    assert resp.usage.total_tokens == 7
    assert Usage(1, 2).to_json() == {
        "input_tokens": 1,
        "output_tokens": 2,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    assert Usage(1, 2, reasoning_tokens=1).to_json()["reasoning_tokens"] == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  ```json\n{"a": {"b": [1, 2]}}\n```', {"a": {"b": [1, 2]}}),
        ('Verdict: {"pass": false} and {"x": 1}', {"pass": False}),
        ("[1, 2]", None),
        ('[{"a": 1}]', {"a": 1}),
        ('{not json} then {"ok": true}', {"ok": True}),
        ("nothing", None),
        ("", None),
    ],
)
def test_parse_json_object(text: str, expected: dict[str, Any] | None) -> None:
    assert parse_json_object(text) == expected


class Scripted:
    """A client that replies with the given texts in order and records requests."""

    provider = "scripted"
    model = "s-1"

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(
            [{"type": "text", "text": self.texts.pop(0)}], Usage(1, 1), "end_turn", self.model
        )


def test_complete_json_first_try_and_request_shape() -> None:
    client = Scripted('{"kind": "neutral"}')
    assert complete_json(client, system="sys", user="u", seed=4, max_tokens=99) == {"kind": "neutral"}
    r = client.requests[0]
    assert (r.model, r.system, r.messages, r.seed, r.max_tokens, r.tools) == (
        "s-1",
        "sys",
        [{"role": "user", "content": "u"}],
        4,
        99,
        [],
    )


def test_complete_json_retries_then_fails_clearly() -> None:
    client = Scripted("nope", '["list"]', '{"ok": 1}')
    assert complete_json(client, system="s", user="u") == {"ok": 1}
    assert [len(r.messages) for r in client.requests] == [1, 3, 5]
    client = Scripted("a", "b", "c")
    with pytest.raises(ModelOutputError, match="no JSON object after 3 attempt") as info:
        complete_json(client, system="s", user="u")
    assert isinstance(info.value, ModelError)


def test_make_client_rejects_unknown_provider() -> None:
    known = "known: sim, anthropic, openai, vllm, ollama"
    with pytest.raises(InvalidInput, match=f"unknown provider 'llamafile'; {known}"):
        make_client("llamafile", "m", Settings())


def test_role_client_defaults_and_overrides() -> None:
    s = Settings()
    judge = role_client("judge", "sim", "sim-1", s)
    assert (judge.provider, judge.model, getattr(judge, "role", None)) == ("sim", "sim-1", "judge")
    s = Settings(roles=RoleModels(critic=RoleModel(model="sim-big")))
    assert role_client("critic", "sim", "sim-1", s).model == "sim-big"
    s = Settings(roles=RoleModels(critic=RoleModel(provider="anthropic")))
    with pytest.raises(SettingsError, match="RSI_ROLE_CRITIC_MODEL"):
        role_client("critic", "sim", "sim-1", s)
    s = Settings(roles=RoleModels(signal=RoleModel(provider="sim")))
    assert role_client("signal", "anthropic", "claude-x", s).provider == "sim"
    assert getattr(role_client("policy", "sim", "sim-1", Settings()), "role", None) == "policy"


def test_thinking_levels() -> None:
    assert thinking_config(None, 8192) is None
    assert thinking_config("off", 8192) is None
    assert thinking_config("high", 8192) == {"type": "enabled", "budget_tokens": 8191}
    assert thinking_config("2048", 8192) == {"type": "enabled", "budget_tokens": 2048}
    assert thinking_config("adaptive", 100) == {"type": "adaptive"}
    assert thinking_config("low", 1000) is None  # no room for the minimum budget
    with pytest.raises(ModelBadRequest):
        thinking_config("extreme", 8192)


def test_error_for_status() -> None:
    assert isinstance(error_for_status("openai", 429, ""), ModelTransientError)
    assert isinstance(error_for_status("openai", 529, ""), ModelTransientError)
    assert isinstance(error_for_status("openai", 408, ""), ModelTransientError)
    assert isinstance(error_for_status("openai", 403, ""), ModelAuthError)
    assert isinstance(error_for_status("openai", 413, ""), ModelBadRequest)
    assert "***" in str(error_for_status("openai", 400, "key abc123 bad", ("abc123",)))


def test_call_with_retries_lets_foreign_exceptions_through() -> None:
    calls = []

    def boom() -> None:
        calls.append(1)
        raise KeyError("bug")

    with pytest.raises(KeyError):
        call_with_retries(boom, RetryPolicy("x", max_retries=3, backoff_s=0), lambda e: None)
    assert calls == [1]
