"""The ``anthropic`` and ``openai`` role paths against the local wire-format server (issue 6
acceptance list): one full consolidation that adopts.

Live turns, replays and every consolidation role go through the real SDK client of the provider
to a :class:`WireServer` whose responder (:class:`WireSim`) decodes each request, decides its role
from the request itself and answers as the sim model in that role, in the provider's format.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsi_common.config import Settings
from rsi_common.llm import ModelClient, ModelRequest, make_client
from rsi_common.llm.anthropic import AnthropicClient
from rsi_common.llm.openai import OpenAIClient
from rsi_worker.consolidate import ConsolidationResult, ModelFactory
from rsi_worker.jobs.scenario import CORRECTION
from rsi_worker.roles.proposer import proposer_system
from rsi_worker.roles.sim.proposer import TRAIT_TEXT
from tests.support.pipeline import Stack
from tests.support.wire_server import (
    ANTHROPIC,
    OPENAI,
    Received,
    Reply,
    WireServer,
    anthropic_text,
    openai_completion,
)
from tests.support.wire_sim import WireSim, anthropic_request, openai_request, role_of, role_systems

KEY = "test-key"
REQUEST = "Compare laptops: use search query=laptops"
NEXT = "Compare phones: use search query=phones"
ROLES = {"signal", "judge", "analyst", "proposer", "critic", "policy"}
WIRE: dict[str, tuple[str, str, type]] = {
    "anthropic": (ANTHROPIC, "claude-wire", AnthropicClient),
    "openai": (OPENAI, "gpt-wire", OpenAIClient),
}
NOT_JSON = "The answer looks fine to me."


@pytest.fixture
def srv() -> Iterator[WireServer]:
    with WireServer(responder=WireSim()) as server:
        yield server


def sim_of(srv: WireServer) -> WireSim:
    assert isinstance(srv.responder, WireSim)
    return srv.responder


def wire_settings(srv: WireServer, db: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{db}",
        anthropic_api_key=KEY,
        anthropic_base_url=srv.anthropic_base_url,
        openai_api_key=KEY,
        openai_base_url=srv.openai_base_url,
        model_backoff_s=0,
        model_timeout_s=10,
    )


def sdk_models(settings: Settings, built: list[tuple[str, str, ModelClient]]) -> ModelFactory:
    """Every role (``policy`` for replays) on the real client of the agent's provider."""

    def build(provider: str, model: str, role: str) -> ModelClient:
        client = make_client(provider, model, settings, role=role)
        built.append((provider, role, client))
        return client

    return build


def role_of_body(path: str, body: dict[str, Any]) -> str:
    return role_of(anthropic_request(body) if path == ANTHROPIC else openai_request(body))


def decisions(result: ConsolidationResult) -> dict[str, Any]:
    rnd = result.round
    return {
        "status": result.status,
        "winner": rnd["winner"],
        "incumbent": rnd["incumbent"]["S"],
        "candidates": [(c["variant"], c["outcome"], c["S"], c["components"]) for c in rnd["candidates"]],
    }


def sim_decisions(db: Path) -> dict[str, Any]:
    """The same scenario on the sim client directly (no wire)."""
    stack = Stack(Settings(database_url=f"sqlite:///{db}", model_backoff_s=0))
    try:
        stack.say("shop", "c1", REQUEST)
        return decisions(stack.consolidate("shop", stack.say("shop", "c1", CORRECTION)))
    finally:
        stack.close()


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_correction_is_adopted_over_the_wire(provider: str, srv: WireServer, tmp_path: Path) -> None:
    path, model, sdk_client = WIRE[provider]
    sim = sim_of(srv)
    settings = wire_settings(srv, tmp_path / "wire.db")
    built: list[tuple[str, str, ModelClient]] = []
    live = make_client(provider, model, settings, role="policy")
    assert isinstance(live, sdk_client)
    stack = Stack(settings, models=sdk_models(settings, built), policy_client=live)
    try:
        first = stack.say("shop", "c1", REQUEST)
        assert first.world is not None
        assert (first.world["provider"], first.world["model"]) == (provider, model)
        live_calls = sim.of("policy")
        assert [c.request.model for c in live_calls] == [model, model]  # the tool call, then the answer
        assert first.usage["input_tokens"] == sum(c.usage.input_tokens for c in live_calls) > 0
        assert first.usage["output_tokens"] == sum(c.usage.output_tokens for c in live_calls) > 0
        correction = stack.say("shop", "c1", CORRECTION)

        # complete_json parse failures are retried: the first consolidation request (the signal
        # reader's) gets an unparseable reply from the server's queue, the first judge call one
        # scripted for its role
        opened = len(srv.received)
        srv.push(
            path, Reply(body=anthropic_text(NOT_JSON) if path == ANTHROPIC else openai_completion(NOT_JSON))
        )
        sim.script("judge", NOT_JSON)
        result = stack.consolidate("shop", correction)
        assert result.status == "adopted", result.reason
        assert srv.pending(path) == 0 and role_of_body(path, srv.received[opened].body) == "signal"
        assert_retried(sim, "signal", '"kind": "correction"')
        assert_retried(sim, "judge", '"pass": false')

        # the adopted harness answers the next live turn with a table, through the wire
        before = len(sim.calls)
        again = stack.say("shop", "c2", NEXT)
        assert again.world is not None and again.world["harness_version"] == result.version
        assert "|---" in again.answer
        turn_calls = sim.calls[before:]
        assert {c.role for c in turn_calls} == {"policy"}
        assert all(TRAIT_TEXT["table"] in c.request.system for c in turn_calls)
    finally:
        stack.close()

    # the decisions are the sim's own: the wire mapping loses nothing the run depends on
    assert decisions(result) == sim_decisions(tmp_path / "sim.db")

    # every role ran on the provider's SDK client
    assert {p for p, _, _ in built} == {provider}
    assert all(isinstance(c, sdk_client) for _, _, c in built)
    assert {r for _, r, _ in built} >= ROLES
    assert not sim.errors
    assert set(sim.roles(path)) >= ROLES and not sim.roles(OPENAI if path == ANTHROPIC else ANTHROPIC)

    # the wire shape of every request, and the key only in the auth header
    received = [r for r in srv.received if r.path == path]
    assert len(received) == len(srv.received)
    for r in received:
        assert KEY not in json.dumps(r.body), "a request body holds the API key"
        assert_auth(provider, r)
    by_role: dict[str, list[dict[str, Any]]] = {}
    for r in received:
        by_role.setdefault(role_of_body(path, r.body), []).append(r.body)
    assert set(by_role) >= ROLES
    check = check_anthropic if provider == "anthropic" else check_openai
    for role, bodies in by_role.items():
        for body in bodies:
            check(role, body, model)
    check_tool_round_trip(provider, by_role["policy"])


def assert_retried(sim: WireSim, role: str, verdict: str) -> None:
    """The role's first call was unparseable and the next one repeats it with that reply appended."""
    calls = sim.of(role)
    retry = next(c for c in calls if len(c.request.messages) == 3)
    prompt, reply, nudge = retry.request.messages
    assert (prompt["role"], reply["role"], nudge["role"]) == ("user", "assistant", "user")
    assert NOT_JSON in json.dumps(reply["content"])
    assert verdict in retry.reply  # answered from the prompt, not from the nudge
    alone = ModelRequest(model=retry.request.model, system=retry.request.system, messages=[prompt])
    assert retry.reply == sim.clients[role].complete(alone).text


def assert_auth(provider: str, r: Received) -> None:
    """The key travels in the auth header (Anthropic SDKs use ``x-api-key`` or a bearer token)."""
    bearer = r.headers.get("authorization") == f"Bearer {KEY}"
    if provider == "anthropic":
        assert r.headers.get("x-api-key") == KEY or bearer
    else:
        assert bearer and "x-api-key" not in r.headers


def role_prompt(role: str) -> str:
    return next(system for system, name in role_systems().items() if name == role)


def check_anthropic(role: str, body: dict[str, Any], model: str) -> None:
    assert set(body) <= {"model", "max_tokens", "messages", "system", "tools", "thinking", "temperature"}
    assert body["model"] == model and isinstance(body["max_tokens"], int)
    messages = body["messages"]
    assert messages and messages[0]["role"] == "user"
    assert all(m["role"] in ("user", "assistant") for m in messages)
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(messages))
    if role == "policy":
        assert "search" in [t["name"] for t in body["tools"]]
        assert all(set(t) <= {"name", "description", "input_schema", "cache_control"} for t in body["tools"])
        return
    assert "tools" not in body
    if role == "proposer":  # sent with cache_points=["system"]
        assert body["system"] == [
            {"type": "text", "text": proposer_system(), "cache_control": {"type": "ephemeral"}}
        ]
    else:
        assert isinstance(body["system"], str) and body["system"].strip() == role_prompt(role)


def check_openai(role: str, body: dict[str, Any], model: str) -> None:
    assert set(body) <= {
        "model",
        "max_tokens",
        "messages",
        "tools",
        "temperature",
        "seed",
        "reasoning_effort",
        "response_format",
    }
    assert body["model"] == model and isinstance(body["max_tokens"], int)  # a custom base URL
    messages = body["messages"]
    assert messages[0]["role"] == "system" and isinstance(messages[0]["content"], str)
    assert all(m["role"] in ("user", "assistant", "tool") for m in messages[1:])
    if role == "policy":
        tools = body["tools"]
        assert "search" in [t["function"]["name"] for t in tools]
        assert all(t["type"] == "function" for t in tools)
        assert all(set(t["function"]) == {"name", "description", "parameters"} for t in tools)
        return
    assert "tools" not in body and "seed" not in body
    assert messages[0]["content"].strip() == role_prompt(role)


def check_tool_round_trip(provider: str, bodies: list[dict[str, Any]]) -> None:
    """Policy requests carry the search call and its result in the provider's shape; replays carry
    their trial index as the seed where the API has one."""
    if provider == "anthropic":
        assert not any("seed" in b for b in bodies)
        uses = [
            blk
            for b in bodies
            for m in b["messages"]
            if m["role"] == "assistant" and isinstance(m["content"], list)
            for blk in m["content"]
            if blk["type"] == "tool_use"
        ]
        results = [
            blk
            for b in bodies
            for m in b["messages"]
            if m["role"] == "user" and isinstance(m["content"], list)
            for blk in m["content"]
            if blk["type"] == "tool_result"
        ]
        assert uses and all(
            u["name"] == "search" and u["input"] == {"query": u["input"]["query"]} for u in uses
        )
        assert {r["tool_use_id"] for r in results} <= {u["id"] for u in uses}
        assert any("Aero 14: 1299 EUR" in json.dumps(r["content"]) for r in results)
        return
    assert {b.get("seed") for b in bodies} >= {None, 0, 1}  # live turns: none; replays: trial index
    calls = [
        c
        for b in bodies
        for m in b["messages"]
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    ]
    tools = [m for b in bodies for m in b["messages"] if m["role"] == "tool"]
    assert calls and all(c["type"] == "function" and c["function"]["name"] == "search" for c in calls)
    assert all(json.loads(c["function"]["arguments"]).keys() == {"query"} for c in calls)
    assert {t["tool_call_id"] for t in tools} <= {c["id"] for c in calls}
    assert any("Aero 14: 1299 EUR" in t["content"] for t in tools)
