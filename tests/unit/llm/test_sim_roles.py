"""docs/formats.md#sim-4-the-roles: the sim judge and implicit-signal reader on the
docs/algorithm/consolidation.md §3.7 / §3.4 layouts."""

from __future__ import annotations

from typing import Any

import pytest

from rsi_common.config import Settings
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse, Usage, complete_json, make_client
from rsi_common.llm.sim import SimClient
from rsi_common.llm.sim.roles import judge_verdict, read_signal
from rsi_common.llm.sim.traits import Answer, apply_traits, render

CORRECTION = "No, show it as a table and keep the recommendation to one line"
FACTS = [("Basic", "10 USD"), ("Pro", "25 USD")]
BASE = render(Answer(facts=list(FACTS)))
FIXED = render(apply_traits(Answer(facts=list(FACTS)), ["table", "one_line_reco"]))


def judge_prompt(request: str, answer: str, criterion: str, reference: str | None = None) -> str:
    parts = [f"REQUEST:\n{request}", f"ANSWER:\n{answer}", f"CRITERION:\n{criterion}"]
    if reference is not None:
        parts.append(f"REFERENCE ANSWER:\n{reference}")
    return "\n\n".join(parts)


def signal_prompt(request: str, answer: str, next_message: str) -> str:
    return f"EARLIER REQUEST:\n{request}\n\nANSWER:\n{answer}\n\nNEXT MESSAGE:\n{next_message}"


def ask(role: str, user: str) -> dict[str, object]:
    return complete_json(
        make_client("sim", "sim-1", Settings(), role=role), system="(role prompt)", user=user
    )


# --- signal -----------------------------------------------------------------------------------


def test_signal_correction_example_from_sim_md() -> None:
    reply = ask("signal", signal_prompt("Compare: Basic 10 USD, Pro 25 USD", BASE, CORRECTION))
    assert reply == {
        "kind": "correction",
        "criterion": "A better answer does this: show it as a table and keep the recommendation to one line",
        "evidence": CORRECTION,
    }


@pytest.mark.parametrize(
    ("message", "kind", "criterion"),
    [
        ("not what I asked: list the prices", "correction", "what I asked: list the prices"),
        ("Wrong plan.", "correction", "Wrong plan."),
        ("Actually, use bullets", "correction", "use bullets"),
        ("Give me the yearly price instead", "correction", "Give me the yearly price instead"),
        ("아니요, 표로 보여 주세요", "correction", "표로 보여 주세요"),
        ("This is too long", "complaint", "This is too long"),
        ("hard to read, fix the formatting", "complaint", "hard to read, fix the formatting"),
        ("Thanks, perfect!", "accept", ""),
        ("고마워", "accept", ""),
        ("Now compare the yearly plans", "neutral", ""),
        ("Nothing else today", "neutral", ""),
        ("No.", "correction", "No."),
    ],
)
def test_signal_kinds(message: str, kind: str, criterion: str) -> None:
    got = read_signal(message)
    assert got["kind"] == kind
    expected = f"A better answer does this: {criterion}" if criterion else ""
    assert got["criterion"] == expected


def test_signal_evidence_clipped() -> None:
    assert len(read_signal("no " + "x" * 1000)["evidence"]) == 300


# --- judge ------------------------------------------------------------------------------------

CRITERION = "A better answer does this: show it as a table and keep the recommendation to one line"


def test_judge_incumbent_fails_and_fixed_answer_passes() -> None:
    request = "Compare: Basic 10 USD, Pro 25 USD"
    fail = ask("judge", judge_prompt(request, BASE, CRITERION))
    assert fail["pass"] is False and "table" in str(fail["reason"]) and "one_line_reco" in str(fail["reason"])
    ok = ask("judge", judge_prompt(request, FIXED, CRITERION))
    assert ok["pass"] is True


def test_judge_names_only_the_missing_trait() -> None:
    table_only = render(apply_traits(Answer(facts=list(FACTS)), ["table"]))
    passed, reason = judge_verdict("r", table_only, CRITERION)
    assert not passed and reason == "missing trait(s): one_line_reco"


def test_judge_language_of_request() -> None:
    korean = render(apply_traits(Answer(facts=list(FACTS)), ["korean"]))
    criterion = "Answer in the language of the request."
    assert judge_verdict("요금제를 비교해 주세요", BASE, criterion)[0] is False
    assert judge_verdict("요금제를 비교해 주세요", korean, criterion)[0] is True
    assert judge_verdict("compare plans", BASE, criterion)[0] is True  # no trait named → non-empty


def test_judge_reference_facts() -> None:
    same = "The answer states the same facts, numbers and conclusions as the reference answer."
    reference = "a: 1\nb: 2\nc: 3\nd: 4\ne: 5\nRecommendation: a"
    four_of_five = "| a | 1 |\n|---|---|\n| b | 2 |\n| c | 3 |\n| d | 4 |"
    assert judge_verdict("r", four_of_five, same, reference) == (True, "4 of 5 reference facts present")
    passed, reason = judge_verdict("r", "a: 1\nb: 2\nc: 3", same, reference)
    assert not passed and "d: 4" in reason and "e: 5" in reason
    reply = ask("judge", judge_prompt("r", "a: 1", same, reference))
    assert reply["pass"] is False


def test_judge_reference_words() -> None:
    reference = "Seoul is larger than Busan overall"
    assert judge_verdict("r", "Seoul larger than Busan overall", "keeps key points", reference)[0] is True
    assert judge_verdict("r", "Seoul wins", "keeps key points", reference)[0] is False


def test_judge_non_empty_and_not_error() -> None:
    criterion = "The answer does not have the problem the user reported (wrong plan)."
    assert judge_verdict("r", "Basic: 10", criterion) == (True, "the answer is a non-empty answer")
    assert judge_verdict("r", "  ", criterion)[0] is False
    assert judge_verdict("r", "Error: tool failed", criterion)[0] is False
    assert judge_verdict("r", "[error] boom", criterion)[0] is False


def test_judge_layout_with_blank_lines_inside_sections() -> None:
    client = SimClient(role="judge")
    answer = (
        "Sure — here is what I found.\n\n| item | value |\n|---|---|\n| a | 1 |\n\nRecommendation: a — fine."
    )
    user = judge_prompt("Earlier in this conversation:\nUser: hi\n\nCurrent request:\nx", answer, CRITERION)
    assert complete_json(client, system="", user=user) == {
        "pass": True,
        "reason": "has the trait(s) the criterion asks for: table, one_line_reco",
    }


def test_the_loop_is_observable() -> None:
    """docs/formats.md closing paragraph: correction → criterion → incumbent fails → candidate passes."""
    request = "Compare the plans: Basic 10 USD, Pro 25 USD"
    policy = SimClient()
    live = policy.complete(
        ModelRequest(model="sim-1", system="You are helpful.", messages=_user(request))
    ).text
    signal = ask("signal", signal_prompt(request, live, CORRECTION))
    criterion = str(signal["criterion"])
    incumbent = "You are helpful."
    candidate = incumbent + (
        "\n\nWhen you compare options, present them as a markdown table. Keep the recommendation to one line."
    )
    for seed in (0, 1):
        old = policy.complete(
            ModelRequest(model="sim-1", system=incumbent, messages=_user(request), seed=seed)
        )
        new = policy.complete(
            ModelRequest(model="sim-1", system=candidate, messages=_user(request), seed=seed)
        )
        assert ask("judge", judge_prompt(request, old.text, criterion))["pass"] is False
        assert ask("judge", judge_prompt(request, new.text, criterion))["pass"] is True


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


class _GarbleFirst:
    """A client whose first reply is not JSON; then the inner sim client answers."""

    def __init__(self, inner: ModelClient) -> None:
        self.inner, self.provider, self.model = inner, inner.provider, inner.model
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if len(self.requests) == 1:
            return ModelResponse([{"type": "text", "text": "I think so."}], Usage(1, 1), "end_turn", "sim-1")
        return self.inner.complete(request)


@pytest.mark.parametrize(
    ("role", "prompt"),
    [
        ("judge", judge_prompt("Compare: Basic 10 USD, Pro 25 USD", BASE, CRITERION)),
        ("judge", judge_prompt("Compare: Basic 10 USD, Pro 25 USD", FIXED, CRITERION)),
        ("signal", signal_prompt("Compare: Basic 10 USD, Pro 25 USD", BASE, CORRECTION)),
    ],
)
def test_a_complete_json_retry_is_answered_from_the_prompt(role: str, prompt: str) -> None:
    """The retry conversation ends with a request for JSON; the verdict still comes from the prompt."""
    client = _GarbleFirst(make_client("sim", "sim-1", Settings(), role=role))
    retried = complete_json(client, system="(role prompt)", user=prompt)
    assert len(client.requests) == 2 and len(client.requests[1].messages) == 3
    assert retried == ask(role, prompt)
