"""The critic (docs/formats.md §6.2): deterministic precheck, payload, 3-attempt parse rule."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsi_common.errors import ModelTransientError
from rsi_common.harness import diff_trees
from rsi_common.llm import ModelRequest
from rsi_common.world import TurnWorld
from rsi_worker.gate.precheck import added_content, critic_patterns, precheck
from rsi_worker.roles.critic import critic_user_prompt, recent_user_messages, review
from tests.unit.roles.helpers import CORRECTION, Scripted

ACCEPT = {"verdict": "accept", "reasons": [], "risk_notes": ["fine"]}


def added(*lines: str) -> str:
    """A diff adding ``lines`` to notes.md."""
    return diff_trees({}, {"notes.md": "\n".join(lines) + "\n"})


def world(wid: str, expected: str = "", **kw: Any) -> TurnWorld:
    return TurnWorld(id=wid, data={"input": kw.pop("request", "hi")}, signals={"expected": expected}, **kw)


# Built by concatenation so that no literal secret sits in the repository.
SECRETS = {
    "google api key": "AIza" + "B" * 35,
    "secret key": "sk-" + "a1" * 12,
    "api key assignment": "api_key = '" + "k" * 12 + "'",
    "private key": "-----BEGIN RSA " + "PRIVATE KEY-----",
    "aws key": "AKIA" + "ABCDEFGHIJKLMNOP",
    "github token": "ghp_" + "x" * 24,
    "gitlab token": "glpat-" + "y" * 24,
    "slack token": "xoxb-" + "1234567890ab",
    "json secret": '"pass' + 'word": "' + "z" * 12 + '"',
}


def test_spec_vector_precheck_input() -> None:
    diff = diff_trees({"manifest.json": '{\n  "name": "h0"\n}\n'},
                      {"manifest.json": '{\n  "name": "h1"\n}\n', "skills/x/SKILL.md": "Cite the query.\n"})
    assert added_content(diff) == ["harness/manifest.json", '  "name": "h1"', "harness/skills/x/SKILL.md",
                                   "Cite the query."]


def test_empty_diff_rejected_without_model() -> None:
    model = Scripted([ACCEPT])
    result = review(model, "", "m", "t", [])
    assert (result.verdict, result.reasons, result.stage, model.requests) == ("reject", ["empty diff"],
                                                                              "precheck", [])


@pytest.mark.parametrize("label", sorted(SECRETS))
def test_credential_patterns_never_echoed(label: str) -> None:
    secret = SECRETS[label]
    model = Scripted([ACCEPT])
    result = review(model, added("Use the key " + secret + " for calls."), "m", "t", [])
    assert result.verdict == "reject" and f"precheck: {label}" in result.reasons
    assert model.requests == []
    text = json.dumps(result.to_json())
    assert secret not in text and secret[4:16] not in text
    assert all(r == f"precheck: {r.split(': ', 1)[1]}" and "'" not in r for r in result.reasons)


def test_production_patterns() -> None:
    assert precheck(added("Read RSI_DATABASE_URL first.")) == ["precheck: platform setting name"]
    assert precheck(added("Compare with eval.json and suite.json.")) == [
        "precheck: evaluation artefact: 'eval.json'", "precheck: evaluation artefact: 'suite.json'"]
    assert precheck(added("Use a table.")) == []


def test_world_id_and_expected_text() -> None:
    wid = "w_" + "ab12" * 6
    expected = "Alpha costs 999 EUR and is the better pick overall\nshort line"
    patterns = critic_patterns([world(wid, expected), world(wid, expected)])
    assert [label for label, _ in patterns] == ["recorded world id", "expected answer text"]
    line = "Alpha costs 999 EUR and is the better pick overall"
    reasons = precheck(added(f"Prefer the answer of {wid}.", line), patterns)
    assert reasons == [f"precheck: recorded world id: '{wid}'",
                       "precheck: expected answer text: 'Alpha costs 999 EUR and is the better pick overall'"]
    assert precheck(added(f"id {wid}x and {wid}_2"), patterns) == []
    assert precheck(added("short line"), patterns) == []


def test_only_added_content_is_scanned() -> None:
    wid = "w_" + "cd34" * 6
    patterns = critic_patterns([world(wid)])
    removed = diff_trees({"notes.md": f"about {wid}\n"}, {"notes.md": "general\n"})
    assert precheck(removed, patterns) == []
    in_path = diff_trees({}, {f"skills/{wid}/SKILL.md": "general\n"})
    assert precheck(in_path, patterns) == [f"precheck: recorded world id: '{wid}'"]


def test_json_escaped_text_is_decoded() -> None:
    expected = 'He said "Alpha wins" at 999 EUR per unit'
    patterns = critic_patterns([world("w_1", expected)])
    line = json.dumps({"extra_blocks": [expected]})
    assert '\\"' in line
    assert precheck(added(line), patterns) == [f"precheck: expected answer text: '{expected}'"]


def test_three_attempt_parse_rule() -> None:
    model = Scripted(["I accept.", '{"verdict": "maybe"}', "still no json"])
    result = review(model, added("Use a table."), "m", "t", [])
    assert result.verdict == "reject" and result.stage == "unparseable" and len(model.requests) == 3
    assert result.reasons == ["critic output unparseable after 3 attempts: no JSON object in the reply "
                              "(starts 'still no json')"]
    assert len(model.requests[2].messages) == 5  # each retry appends the reply and a nudge


def test_parse_first_object_span_and_retry() -> None:
    reply = 'Verdict: {"verdict": "Reject", "reasons": "leaks a name", "risk_notes": null}'
    model = Scripted(["nothing", reply])
    result = review(model, added("Use a table."), "m", "t", [])
    assert (result.verdict, result.reasons, result.risk_notes) == ("reject", ["leaks a name"], [])
    assert result.calls == 2


def test_model_errors_count_as_attempts() -> None:
    def boom(_request: ModelRequest) -> str:
        raise ModelTransientError("overloaded")

    result = review(Scripted([boom]), added("Use a table."), "m", "t", [])
    assert result.reasons == ["critic output unparseable after 3 attempts: ModelTransientError: overloaded"]
    accepted = review(Scripted([boom, ACCEPT]), added("Use a table."), "m", "t", [])
    assert accepted.accepted and accepted.risk_notes == ["fine"]


def test_payload_sections_and_clips() -> None:
    edits = [{"id": "E1", "hypothesis": "h" * 30_000}]
    text = critic_user_prompt("+" + "d" * 200_000, "summary", "missing-table", edits, ['No, "table" please'])
    headers = [line for line in text.splitlines() if line.endswith(":") and line.isupper()]
    assert headers == ["SUMMARY:", "TARGETS:", "DECLARED EDITS:", "RECENT USER MESSAGES:", "DIFF:"]
    assert '- "No, "table" please"' in text
    declared = text.split("DECLARED EDITS:\n", 1)[1].split("\n\nRECENT USER MESSAGES:", 1)[0]
    assert len(declared) == 20_000
    assert len(text.split("DIFF:\n", 1)[1]) == 120_000


def test_model_sees_payload(worlds: list[TurnWorld]) -> None:
    model = Scripted([ACCEPT])
    users = recent_user_messages(worlds)
    review(model, added("Use a table."), "Add a table block", "missing-table", [{"id": "E1"}],
           user_messages=users)
    payload = model.requests[0].messages[0]["content"]
    assert "SUMMARY:\nAdd a table block" in payload and f'- "{CORRECTION}"' in payload
    assert model.requests[0].system.startswith("You are a strict reviewer")
    assert "11. Unconditional environment assertions" in model.requests[0].system


def test_recent_user_messages(worlds: list[TurnWorld]) -> None:
    users = recent_user_messages(worlds)
    requests = {w.request for w in worlds}
    assert set(users) == requests  # the next messages are also the later worlds' requests
    assert users.index(CORRECTION) < users.index("Pick a drink for me: tea, coffee")
    lone = world("w_x", request="a " * 400)
    lone.signals["implicit"] = {"kind": "correction", "criterion": "c", "evidence": "No, shorter please"}
    out = recent_user_messages([lone])
    assert out == [("a " * 400).strip()[:300], "No, shorter please"]
