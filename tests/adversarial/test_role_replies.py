"""Every model role's reply is hostile (docs/algorithm/consolidation.md "Hostile replies"): the critic,
the criteria judge, the implicit-signal reader, the proposer, the digester and the policy whose answer
a trial stores. Whatever the reply, the role ends by its documented outcome (a verdict, a failed
check, a ``neutral`` reading, a proposal status, a digest that says why, a trial) — never an exception
— and what it returns is storable (no NaN, no lone surrogate; PostgreSQL refuses both in JSON),
bounded, and holds no credential."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsi_common.harness import h0, workspace_of
from rsi_common.kernel.testing import ScriptedModel, text_response, tool_response
from rsi_common.kinds import K_ENABLED_PRODUCTION
from rsi_common.llm import ModelResponse, Usage, parse_json_object
from rsi_common.replay import ANSWER_CHARS, TRANSCRIPT_CHARS, PolicySpec, replay_world
from rsi_common.stored import first_problem
from rsi_common.world import TurnWorld
from rsi_worker.roles.analyst import View
from rsi_worker.roles.critic import model_review
from rsi_worker.roles.digester import DIGEST_CHARS, DIGEST_KEYS, digest
from rsi_worker.roles.judge import REASON_CHARS, CriteriaJudge
from rsi_worker.roles.proposer import ProposerSetup, propose
from rsi_worker.roles.report_items import REPORT_ITEMS, TEXT_CHARS
from rsi_worker.roles.signal import CRITERION_CHARS, implicit_signal
from tests.adversarial.model_replies import (
    DEEP,
    Scripted,
    credential,
    critic_replies,
    judge_replies,
    proposer_replies,
    signal_replies,
)
from tests.unit.kernel.helpers import NO_RETRY, live, make_plan, no_sleep

CRITIC, JUDGE, SIGNAL, PROPOSER = critic_replies(), judge_replies(), signal_replies(), proposer_replies()


def _storable(out: Any, max_chars: int) -> str:
    """``out`` as the row would hold it; fails when a database would refuse it or it is unbounded."""
    assert first_problem(out) is None
    text = json.dumps(out, ensure_ascii=False, allow_nan=False)
    assert len(text) <= max_chars
    assert credential() not in text
    return text


@pytest.mark.parametrize("text", [DEEP, '{"a": ' + DEEP + "}", "x {" + DEEP])
def test_a_reply_too_deep_to_decode_is_no_object_not_an_exception(text: str) -> None:
    assert parse_json_object(text) is None  # was: RecursionError out of every role's parse


@pytest.mark.parametrize("reply", list(CRITIC.values()), ids=list(CRITIC))
def test_the_critic_gives_a_bounded_storable_verdict(reply: str) -> None:
    review = model_review(Scripted(reply), "+ added line", "m", "t", [])
    assert review.verdict in ("accept", "reject")
    assert len(review.reasons) <= REPORT_ITEMS and len(review.risk_notes) <= REPORT_ITEMS
    assert all(len(t) <= TEXT_CHARS for t in [*review.reasons, *review.risk_notes])
    _storable(review.to_json(), (2 * REPORT_ITEMS + 1) * TEXT_CHARS)


def test_a_well_formed_verdict_is_kept_whole() -> None:
    reply = json.dumps({"verdict": "reject", "reasons": ["quotes a user", ""], "risk_notes": "broad"})
    review = model_review(Scripted(reply), "+ x", "m", "t", [])
    assert (review.verdict, review.reasons, review.risk_notes, review.stage) == (
        "reject", ["quotes a user"], ["broad"], "model")


@pytest.mark.parametrize("reply", list(JUDGE.values()), ids=list(JUDGE))
def test_the_judge_gives_a_bounded_storable_verdict(reply: str) -> None:
    judge = CriteriaJudge(Scripted(reply))
    passed, reason = judge.verdict("request", "answer", "criterion")
    assert isinstance(passed, bool) and len(reason) <= REASON_CHARS
    _storable({"reason": reason, "cache": judge.new_entries}, 2 * REASON_CHARS + 200)


def test_a_judge_reply_with_a_string_pass_still_counts() -> None:
    judge = CriteriaJudge(Scripted('{"pass": "TRUE", "reason": "same facts"}'))
    assert judge.verdict("q", "a", "c") == (True, "same facts")


@pytest.mark.parametrize("reply", list(SIGNAL.values()), ids=list(SIGNAL))
def test_the_signal_reader_gives_a_bounded_storable_reading(reply: str) -> None:
    out = implicit_signal(Scripted(reply), "request", "answer", "next message")
    assert out["kind"] in ("correction", "complaint", "accept", "neutral")
    assert len(out.get("criterion", "")) <= CRITERION_CHARS
    _storable(out, CRITERION_CHARS + 1_000)


@pytest.mark.parametrize("reply", list(PROPOSER.values()), ids=list(PROPOSER))
def test_the_proposer_run_ends_by_a_status_with_a_bounded_storable_record(reply: str) -> None:
    ws = workspace_of(h0())
    setup = ProposerSetup(h0(), (), 3, K_ENABLED_PRODUCTION)
    result = propose(Scripted(reply), ws, setup, system="S", user="U", repair=True)
    assert result.status in ("done", "abort", "max_turns", "error")
    _storable(result.to_json(), 60_000)
    assert first_problem(ws) is None  # the workspace becomes the candidate's stored files


def test_a_done_with_an_unstorable_edit_is_answered_with_an_error_and_the_loop_goes_on() -> None:
    model = ScriptedModel([text_response(PROPOSER["nan in an edit"]),
                           text_response('{"action": "done", "edits": []}')])
    result = propose(model, workspace_of(h0()), ProposerSetup(h0(), (), 3, K_ENABLED_PRODUCTION),
                     system="S", user="U", repair=True)
    assert (result.status, result.edits) == ("done", [])
    assert [e["ok"] for e in result.log] == [False, True]
    assert "cannot be stored" in result.log[0]["message"]


def _view() -> View:
    world = TurnWorld(id="w1", data={"input": "Compare the two laptops"})
    row = {"result": {"replay": {"answer": "a", "status": "completed"}}}
    return View(world=world, row=row, checks=[{"name": "t", "criterion": "c"}])


def _returns(tool_input: Any) -> ModelResponse:
    block = {"type": "tool_use", "id": "tu_1", "name": "return", "input": tool_input}
    return ModelResponse([block], Usage(10, 5), "tool_use", "scripted-1")


@pytest.mark.parametrize("tool_input", [
    {"lens": {"a": float("nan")}, "blocker": "b\ud800", "narrative": "n" * 5_000_000, "evidence": [1e999]},
    {"lens": "format", "blocker": credential()},
    [1, 2, 3],
    "return",
], ids=["nan, surrogate and 5 MB", "a credential", "a list", "a string"])
def test_a_digest_of_a_hostile_return_is_bounded_and_storable(tool_input: Any) -> None:
    out = digest(ScriptedModel([_returns(tool_input)]), _view(), "fail")
    assert set(DIGEST_KEYS) <= set(out)
    _storable({k: out[k] for k in DIGEST_KEYS}, DIGEST_CHARS)


def test_a_digester_tool_call_with_a_list_for_arguments_is_answered() -> None:
    bad = ModelResponse([{"type": "tool_use", "id": "t", "name": "grep", "input": ["x"]}], Usage(1, 1),
                        "tool_use", "scripted-1")
    out = digest(ScriptedModel([bad, _returns({"lens": "format", "blocker": "b"})]), _view(), "fail")
    assert out["blocker"] == "b"  # was: AttributeError, and the digest said "unavailable"


def _recorded() -> TurnWorld:
    result, _ = live(make_plan(), None, ScriptedModel([text_response("EU: 12")]))
    assert result.world is not None
    return TurnWorld("w_rec", result.world)


@pytest.mark.parametrize("script", [
    [text_response("a\ud800" + "x" * 5_000_000)],
    [tool_response("get_sales", {"region": float("nan"), "note": "\udfff"}), text_response("b\udfff")],
], ids=["a 5 MB answer with a lone surrogate", "a NaN and a lone surrogate in a tool call"])
def test_a_replayed_trial_stores_a_bounded_storable_answer(script: list[Any]) -> None:
    model = ScriptedModel(script, repeat_last=True)
    result = replay_world(_recorded(), h0(), PolicySpec("scripted", "scripted-1"),
                          llm_factory=lambda _p: model, retry=NO_RETRY, sleep=no_sleep)
    assert result.error == "" and result.answer.startswith(("a\ufffd", "b\ufffd"))
    assert len(result.answer) <= ANSWER_CHARS + 1
    _storable(result.to_json(), ANSWER_CHARS + 40 * TRANSCRIPT_CHARS)
