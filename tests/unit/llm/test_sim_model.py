"""docs/formats.md#sim-1-configuration and docs/formats.md#sim-3-the-policy: call seed, noise, latency,
errors, tokens and the policy."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from rsi_common.config import Settings, SimConfig
from rsi_common.errors import InvalidInput, ModelBadRequest, ModelTransientError
from rsi_common.llm import (
    COMPACTION_SYSTEM_PROMPT,
    KERNEL_NOTE_TAG,
    ModelClient,
    ModelRequest,
    canonical_json,
    make_client,
)
from rsi_common.llm.sim import (
    TRAITS,
    SimCall,
    SimClient,
    call_seed,
    detect_one_line_reco,
    detect_table,
    detected_traits,
    input_tokens,
    output_tokens,
)
from rsi_common.llm.sim.core import find_turn
from tests.unit.llm.helpers import req, tool

ALL_TRIGGERS = "Use a table, one line recommendation, bullets, be brief, units, cite sources, in Korean."
INPUT = "Compare the plans: Basic 10 USD, Pro 25 USD, Team 40 USD"


class Sleeps:
    """A fake sleep that records its arguments (seconds)."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def sim(sleep: Sleeps | None = None, role: str = "policy", **config: Any) -> SimClient:
    return SimClient(config=SimConfig(**config), role=role, sleep=sleep or Sleeps())


# --- seed and determinism ---------------------------------------------------------------------


def test_call_seed_is_sha256_of_seed_role_messages_request_seed() -> None:
    import hashlib

    r = req("hi", seed=3)
    expected = hashlib.sha256(canonical_json([7, "policy", r.messages, 3]).encode()).digest()
    assert call_seed(7, "policy", r) == expected
    assert call_seed(7, "judge", r) != expected
    assert call_seed(8, "policy", r) != expected


def test_is_a_model_client_and_built_by_make_client() -> None:
    client = make_client("sim", "sim-1", Settings(sim=SimConfig(noise=0.5)), role="judge")
    assert isinstance(client, ModelClient) and isinstance(client, SimClient)
    assert (client.provider, client.model, client.role, client.config.noise) == ("sim", "sim-1", "judge", 0.5)


def test_same_request_repeats_identically() -> None:
    r = req(INPUT, system=ALL_TRIGGERS, seed=0)
    a, b = sim(noise=0.5).complete(r), sim(noise=0.5).complete(r)
    assert a == b


def test_without_noise_trials_are_identical() -> None:
    client = sim()
    texts = {client.complete(req(INPUT, system=ALL_TRIGGERS, seed=j)).text for j in range(6)}
    assert len(texts) == 1


NOISY = "Use a table, one line recommendation, be brief, units, cite sources, in Korean."
NOISY_TRAITS = ["table", "one_line_reco", "brief", "units", "cite", "korean"]
TWO_PLANS = "Compare: Basic 10 USD, Pro 25 USD"


def test_noise_drops_traits_per_trial_and_repeats() -> None:
    client = sim(noise=0.5)
    seen = set()
    for j in range(10):
        r = req(TWO_PLANS, system=NOISY, seed=j)
        kept = [t for t in _kept(client, r) if t in NOISY_TRAITS]
        text = client.complete(r).text
        assert detected_traits(text) == kept, (j, text)
        assert sim(noise=0.5).complete(r).text == text  # re-execution repeats
        seen.add(tuple(kept))
    assert len(seen) > 1  # trials differ where noise > 0


def _kept(client: SimClient, r: ModelRequest) -> list[str]:
    call = SimCall(r, "policy", client.config, call_seed(client.config.seed, "policy", r))
    return [t for t in TRAITS if call.draw(f"noise:{t}") >= client.config.noise]


def test_noise_one_drops_every_trait() -> None:
    text = sim(noise=1.0).complete(req(INPUT, system=ALL_TRIGGERS)).text
    assert detected_traits(text) == []


def test_global_seed_changes_the_draws() -> None:
    r = req(INPUT, system=ALL_TRIGGERS, seed=0)
    texts = {sim(noise=0.5, seed=s).complete(r).text for s in range(10)}
    assert len(texts) > 1


# --- latency, errors, tokens ------------------------------------------------------------------


def test_latency_and_jitter_sleep_from_the_call_seed() -> None:
    sleeps = Sleeps()
    client = sim(sleeps, latency_ms=200, jitter_ms=100)
    for j in range(5):
        client.complete(req("hi", seed=j))
    assert len(sleeps.calls) == 5
    assert all(0.2 <= s <= 0.3 for s in sleeps.calls)
    assert len(set(sleeps.calls)) > 1  # jitter differs per call
    again = Sleeps()
    sim(again, latency_ms=200, jitter_ms=100).complete(req("hi", seed=0))
    assert again.calls == sleeps.calls[:1]


def test_no_sleep_by_default() -> None:
    sleeps = Sleeps()
    sim(sleeps).complete(req("hi"))
    assert sleeps.calls == []


def test_error_rate() -> None:
    client = sim(error_rate=0.5)
    outcomes = []
    for j in range(40):
        try:
            client.complete(req("hi", seed=j))
            outcomes.append(True)
        except ModelTransientError as exc:
            assert "sim" in str(exc)
            outcomes.append(False)
    assert 5 < outcomes.count(False) < 35
    # deterministic: the same call fails the same way
    first_failing = outcomes.index(False)
    with pytest.raises(ModelTransientError):
        client.complete(req("hi", seed=first_failing))
    with pytest.raises(ModelTransientError):
        sim(error_rate=1.0).complete(req("hi"))


def test_error_after_latency() -> None:
    sleeps = Sleeps()
    with pytest.raises(ModelTransientError):
        sim(sleeps, error_rate=1.0, latency_ms=50).complete(req("hi"))
    assert sleeps.calls == [0.05]


def test_token_counts() -> None:
    tools = [tool("weather", city="string")]
    r = req("use weather city=Seoul", system="x" * 40, tools=tools)
    chars = 40 + len(canonical_json(r.messages)) + len(canonical_json(tools))
    resp = sim().complete(r)
    assert resp.usage.input_tokens == math.ceil(chars / 4)
    call = resp.content[0]
    assert resp.usage.output_tokens == math.ceil(
        len(canonical_json({"input": call["input"], "name": "weather"})) / 4
    )
    r2 = req("hello", system="")
    resp2 = sim().complete(r2)
    assert resp2.usage.input_tokens == math.ceil(len(canonical_json(r2.messages)) / 4)
    assert resp2.usage.output_tokens == math.ceil(len(resp2.text) / 4)
    assert (
        output_tokens(resp2.content) == resp2.usage.output_tokens
        and input_tokens(r2) == resp2.usage.input_tokens
    )
    # a longer system prompt costs more
    assert sim().complete(req("hello", system="y" * 400)).usage.input_tokens == resp2.usage.input_tokens + 100


# --- the policy: tools ------------------------------------------------------------------------

TOOLS = [tool("weather", city="string", days="integer"), tool("stocks", ticker="string", live="boolean")]


def run_turn(client: SimClient, text: str, results: dict[str, str], system: str = "") -> list[dict[str, Any]]:
    """Drive the sim through one turn, answering each tool call from ``results``."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
    for _ in range(10):
        resp = client.complete(req(messages, system=system, tools=TOOLS))
        messages.append(resp.message())
        if resp.stop_reason != "tool_use":
            return messages
        call = resp.tool_calls[0]
        assert len(resp.tool_calls) == 1
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call["id"], "content": results[call["name"]]}
                ],
            }
        )
    raise AssertionError("the turn did not end")


def test_two_tools_in_one_turn_with_key_value_args() -> None:
    messages = run_turn(
        sim(),
        'use stocks ticker=AAPL live=true, then weather city="New York" days=3. Cite the sources.',
        {"stocks": "price: 190 USD\nchange: 2%", "weather": "temperature: 21 °C\nsky: clear"},
    )
    calls = [b for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    assert [(c["name"], c["input"]) for c in calls] == [
        ("stocks", {"ticker": "AAPL", "live": True}),
        ("weather", {"city": "New York", "days": 3}),
    ]
    assert calls[0]["id"].startswith("toolu_sim_") and calls[0]["id"] != calls[1]["id"]
    final = messages[-1]["content"][0]["text"]
    assert final.splitlines() == [
        "Sure — here is what I found.",
        "price: 190",
        "change: 2",
        "temperature: 21",
        "sky: clear",
        "Recommendation: price",
        "because it comes first.",
        "Sources: stocks, weather",
    ]


def test_tool_named_as_whole_word_only_and_only_once() -> None:
    client = sim()
    assert client.complete(req("weather in Seoul?", tools=TOOLS)).tool_calls[0]["name"] == "weather"
    assert client.complete(req("weathering the storm", tools=TOOLS)).stop_reason == "end_turn"
    assert client.complete(req("use weather", tools=[])).stop_reason == "end_turn"  # no tools offered
    assert client.complete(req("use WEATHER", tools=TOOLS)).tool_calls[0]["name"] == "weather"


def test_untyped_args_are_strings_and_unknown_keys_dropped() -> None:
    free = {"name": "lookup", "description": "", "input_schema": {"type": "object"}}
    call = sim().complete(req("lookup q=rust n=5 flag=true.", tools=[free])).tool_calls[0]
    assert call["input"] == {"q": "rust", "n": "5", "flag": "true"}
    call = sim().complete(req("weather city=Seoul zoom=9", tools=TOOLS)).tool_calls[0]
    assert call["input"] == {"city": "Seoul"}


def test_error_results_give_no_facts() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "use weather: Seoul, Busan"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "weather", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x: 1", "is_error": True}],
        },
    ]
    text = sim().complete(req(messages, tools=TOOLS)).text
    assert "Seoul" in text and "x: 1" not in text


def test_answer_from_input_items() -> None:
    text = sim().complete(req(INPUT)).text
    assert text.splitlines()[1:4] == ["Basic: 10", "Pro: 25", "Team: 40"]


def test_traits_from_system_turn_context_and_input() -> None:
    client = sim()
    assert detect_table(client.complete(req(INPUT, system="Prefer a table.")).text)
    assert detect_table(client.complete(req(INPUT + " as a table")).text)
    ctx = [{"role": "user", "content": "<turn_context>\nNotes: show a table\n</turn_context>\n\n" + INPUT}]
    assert detect_table(client.complete(req(ctx)).text)
    assert not detect_table(client.complete(req(INPUT)).text)


def test_output_schema_gives_facts_object() -> None:
    resp = sim().complete(req(INPUT, system="Use a table.", output_schema={"type": "object"}))
    assert json.loads(resp.text) == {"Basic": "10 USD", "Pro": "25 USD", "Team": "40 USD"}


def test_correction_turn_applies_its_traits() -> None:
    messages = [
        {"role": "user", "content": INPUT},
        {"role": "assistant", "content": "Sure — here is what I found."},
        {"role": "user", "content": "No, show it as a table and keep the recommendation to one line"},
    ]
    text = sim().complete(req(messages)).text
    # the facts are the new input itself (no colon), but both requested traits apply
    assert detect_table(text) and detect_one_line_reco(text)


# --- how the sim finds the input ----------------------------------------------------------------


def test_find_turn_skips_tool_results_kernel_notes_and_turn_context() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "old request"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": [{"type": "text", "text": "use weather city=Seoul"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "weather", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "t: 1 C"}]},
                {"type": "text", "text": "<turn_context>\nbe brief\n</turn_context>\n\n"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": ""}]},
        {"role": "user", "content": KERNEL_NOTE_TAG + "Before finishing: answer.</kernel_note>"},
    ]
    turn = find_turn(messages)
    assert turn.input == "use weather city=Seoul"
    assert [u["id"] for u in turn.tool_uses] == ["a"]
    assert [r["tool_use_id"] for r in turn.results] == ["a"]
    assert turn.context == ""  # the last user message (the note) carries none
    turn = find_turn(messages[:5])
    assert turn.context == "be brief"
    text = sim().complete(req(messages, tools=TOOLS)).text
    assert text.splitlines()[1] == "t: 1"


def test_compaction_request_is_summarised_in_any_role() -> None:
    earlier: list[dict[str, Any]] = [
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "sunny"}]},
    ]
    r = req("Conversation to summarise (JSON):\n" + json.dumps(earlier), system=COMPACTION_SYSTEM_PROMPT)
    summary = sim().complete(r).text
    assert summary.splitlines() == [
        "Earlier conversation (3 messages):",
        "User: What is the weather?",
        "Assistant called weather",
        "Tool result: sunny",
    ]
    assert sim(role="compact").complete(req(earlier)).text.startswith("Earlier conversation (3 messages):")
    assert sim(role="judge").complete(r).text == summary


# --- roles --------------------------------------------------------------------------------------


def test_unknown_and_unimplemented_roles() -> None:
    with pytest.raises(InvalidInput, match="unknown sim role"):
        SimClient(role="oracle")
    with pytest.raises(InvalidInput, match="unknown model role"):
        make_client("sim", "sim-1", Settings(), role="oracle")
    with pytest.raises(ModelBadRequest, match="no behaviour is registered for the role 'analyst'"):
        SimClient(role="analyst", handlers={}).complete(req("hi"))


def test_custom_handler_registry() -> None:
    def echo(call: SimCall) -> list[dict[str, Any]]:
        return [{"type": "text", "text": f"{call.role}:{len(call.request.messages)}"}]

    client = SimClient(role="analyst", handlers={"analyst": echo})
    assert client.complete(req("hi")).text == "analyst:1"


def test_register_sim_role_refuses_silent_replacement() -> None:
    from rsi_common.llm.sim import SIM_ROLES, register_sim_role

    register_sim_role("policy", SIM_ROLES["policy"])  # same handler again: no-op
    with pytest.raises(InvalidInput):
        register_sim_role("policy", lambda call: [])
