"""``ParseOutputComponent`` (docs/formats.md §5.6 *Output*): signal detectors and settling."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsi_common.kernel import run_turn
from rsi_common.kernel.components.output import settle_text
from rsi_common.kernel.testing import ScriptedModel, text_response
from tests.unit.kernel.helpers import NO_RETRY, harness_with, make_plan

SCHEMA = {"type": "object", "properties": {"status": {"type": "string"}}}


def run(text: str, edits: dict[str, Any] | None = None, schema: dict[str, Any] | None = None) -> Any:
    return run_turn(
        make_plan(input="x", tools=[], output_schema=schema),
        harness_with(edits or {}),
        ScriptedModel([text_response(text)]),
        retry=NO_RETRY,
    )


def test_regex_marker_needs_completion_markers() -> None:
    result = run("Stuck.\n[BLOCKED: which account?]", {"output.parse.params.completion_markers": False})
    assert result.status == "completed" and result.answer.endswith("[BLOCKED: which account?]")


def test_a_marker_that_is_not_on_the_last_line_is_ignored() -> None:
    result = run("[FAILED: x]\nActually fine.")
    assert result.status == "completed"


def test_structured_detector_needs_a_schema() -> None:
    reply = json.dumps({"status": "blocked", "message": "need a date"})
    with_schema = run(reply, {"output.parse.params.signal_detector": "structured"}, SCHEMA)
    assert (with_schema.status, with_schema.termination_reason) == ("blocked", "USER_INPUT_REQUIRED")
    assert "output.parse.params.completion_markers" not in with_schema.params_read
    without = run(reply, {"output.parse.params.signal_detector": "structured"})
    assert without.status == "completed"


def test_hybrid_tries_structured_then_regex() -> None:
    result = run(
        '{"status": "ok"}\n[FAILED: broken]', {"output.parse.params.signal_detector": "hybrid"}, SCHEMA
    )
    assert (result.status, result.termination_reason) == ("failed", "AGENT_ERROR")
    result = run(json.dumps({"status": "done"}), {"output.parse.params.signal_detector": "hybrid"}, SCHEMA)
    assert result.status == "completed"


def test_unknown_detector_is_regex() -> None:
    result = run("x\n[FAILED]", {"output.parse.params.signal_detector": "telepathy"})
    assert result.status == "failed" and result.error == "AGENT_ERROR: the agent reported a failure"


@pytest.mark.parametrize(
    ("text", "schema", "expected"),
    [
        ('{"a": "é"}', SCHEMA, '{"a": "é"}'),
        ('Here:\n```json\n{"a": 1}\n```\nbye', SCHEMA, '{"a": 1}'),
        ('Result {"a": [1, 2]} and {"b": 2}', SCHEMA, '{"a": [1, 2]}'),
        ("no json here", SCHEMA, "no json here"),
        ('{"a": 1}', None, '{"a": 1}'),
        ('{not json} then {"ok": true}', SCHEMA, '{"ok": true}'),
    ],
)
def test_settle(text: str, schema: dict[str, Any] | None, expected: str) -> None:
    assert settle_text(text, schema) == expected


def test_the_answer_is_settled_at_turn_end() -> None:
    result = run('Sure!\n```json\n{"status": "done", "n": 2}\n```', schema=SCHEMA)
    assert result.answer == '{"status": "done", "n": 2}'
    assert result.world is not None and result.world["outcome"]["final_text"] == result.answer
