"""``StandardControlComponent`` (docs/formats.md §5.6 *Control*) and the status mapping of §7.3."""

from __future__ import annotations

from typing import Any

from rsi_common.kernel import ToolDef, ToolResult, run_turn
from rsi_common.kernel.components.control import REVIEW_NOTE, WRAP_UP_NOTE
from rsi_common.kernel.testing import ScriptedModel, text_response, tool_response
from rsi_common.llm import KERNEL_NOTE_TAG
from tests.unit.kernel.helpers import NO_RETRY, harness_with, make_plan


def failing_tool() -> ToolDef:
    return ToolDef("lookup", "Look something up.", executor=lambda _i: ToolResult("not found", is_error=True))


def ok_tool() -> ToolDef:
    return ToolDef("lookup", "Look something up.", executor=lambda _i: "a: 1")


def last_user_text(messages: list[dict[str, Any]]) -> str:
    content = messages[-1]["content"]
    return content if isinstance(content, str) else content[-1].get("text", "")


def test_completion_review_after_a_tool_error_once_per_turn() -> None:
    model = ScriptedModel(
        [
            tool_response("lookup", {"q": 1}),
            text_response("Here you go."),
            text_response("The lookup failed: not found."),
        ]
    )
    result = run_turn(make_plan(input="x", tools=[failing_tool()]), None, model, retry=NO_RETRY)
    assert result.status == "completed" and result.steps == 3
    assert model.requests[2].messages[-1]["content"].endswith("</turn_context>\n\n" + REVIEW_NOTE)
    assert {"role": "user", "content": REVIEW_NOTE} in result.transcript
    assert REVIEW_NOTE.startswith(KERNEL_NOTE_TAG)
    assert result.answer == "The lookup failed: not found."
    assert "control.standard.params.completion_review" in result.params_read


def test_completion_review_on_a_blank_answer_and_switched_off() -> None:
    model = ScriptedModel([tool_response("lookup", {}), text_response(""), text_response("a is 1")])
    result = run_turn(make_plan(input="x", tools=[ok_tool()]), None, model, retry=NO_RETRY)
    assert result.answer == "a is 1" and result.steps == 3
    model = ScriptedModel([tool_response("lookup", {}), text_response("")])
    h = harness_with({"control.standard.params.completion_review": False})
    result = run_turn(make_plan(input="x", tools=[ok_tool()]), h, model, retry=NO_RETRY)
    assert result.answer == "" and result.steps == 2 and result.status == "completed"


def test_no_review_param_read_when_no_tools_were_exposed() -> None:
    result = run_turn(
        make_plan(input="x", tools=[]), None, ScriptedModel([text_response("")]), retry=NO_RETRY
    )
    assert "control.standard.params.completion_review" not in result.params_read


def test_repeat_stop_after_three_identical_steps() -> None:
    model = ScriptedModel([tool_response("lookup", {"q": "same"}, tool_use_id=f"t{i}") for i in range(5)])
    result = run_turn(make_plan(input="x", tools=[ok_tool()]), None, model, retry=NO_RETRY)
    assert (result.status, result.termination_reason, result.steps) == ("completed", "REPEAT_STOP", 3)


def test_repeat_stop_kwarg_overrides_the_param() -> None:
    model = ScriptedModel([tool_response("lookup", {"q": "same"}, tool_use_id=f"t{i}") for i in range(5)])
    result = run_turn(
        make_plan(input="x", tools=[ok_tool()], kwargs={"repeat_stop_after": 2}),
        harness_with({"control.standard.params.repeat_stop_after": 5}),
        model,
        retry=NO_RETRY,
    )
    assert (result.termination_reason, result.steps) == ("REPEAT_STOP", 2)
    assert "control.standard.params.repeat_stop_after" not in result.params_read


def test_different_calls_do_not_trigger_repeat_stop() -> None:
    script = [tool_response("lookup", {"q": i}, tool_use_id=f"t{i}") for i in range(4)] + [
        text_response("ok")
    ]
    result = run_turn(make_plan(input="x", tools=[ok_tool()]), None, ScriptedModel(script), retry=NO_RETRY)
    assert (result.termination_reason, result.steps) == ("COMPLETED", 5)


def test_turn_input_budget_soft_note_then_hard_suspend() -> None:
    script = [tool_response("lookup", {"q": i}, tool_use_id=f"t{i}", input_tokens=100) for i in range(5)]
    h = harness_with(
        {"control.standard.params.turn_budget_soft": 150, "control.standard.params.turn_budget_hard": 300}
    )
    model = ScriptedModel(script)
    result = run_turn(make_plan(input="x", tools=[ok_tool()]), h, model, retry=NO_RETRY)
    assert (result.status, result.termination_reason, result.steps) == ("suspended", "TURN_INPUT_BUDGET", 3)
    notes = [
        b
        for m in model.requests[2].messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "text" and b.get("text") == WRAP_UP_NOTE
    ]
    assert len(notes) == 1


def test_turn_input_budget_kwarg_overrides_and_zero_is_off() -> None:
    script = [tool_response("lookup", {"q": i}, tool_use_id=f"t{i}", input_tokens=10**7) for i in range(2)]
    script.append(text_response("done"))
    h = harness_with({"control.standard.params.turn_budget_hard": 1})
    result = run_turn(
        make_plan(input="x", tools=[ok_tool()], kwargs={"turn_input_budget_tokens": [0, 0]}),
        h,
        ScriptedModel(script),
        retry=NO_RETRY,
    )
    assert result.status == "completed"
    assert not {"control.standard.params.turn_budget_soft", "control.standard.params.turn_budget_hard"} & set(
        result.params_read
    )


def test_signals_map_to_statuses() -> None:
    blocked = run_turn(
        make_plan(input="x", tools=[]),
        None,
        ScriptedModel([text_response("I need the id.\n[BLOCKED: need the order id]")]),
        retry=NO_RETRY,
    )
    assert (blocked.status, blocked.termination_reason) == ("blocked", "USER_INPUT_REQUIRED")
    assert blocked.answer == "I need the id."
    failed = run_turn(
        make_plan(input="x", tools=[]),
        None,
        ScriptedModel([text_response("Cannot.\n[FAILED: no access]\n")]),
        retry=NO_RETRY,
    )
    assert (failed.status, failed.termination_reason, failed.error) == (
        "failed",
        "AGENT_ERROR",
        "AGENT_ERROR: no access",
    )
    done = run_turn(
        make_plan(input="x", tools=[]), None, ScriptedModel([text_response("Fine.\n[DONE]")]), retry=NO_RETRY
    )
    assert (done.status, done.answer, done.error) == ("completed", "Fine.", "")
