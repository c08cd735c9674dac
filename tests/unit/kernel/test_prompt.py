"""``SystemPromptComponent`` (docs/formats.md §5.6 *Prompt*)."""

from __future__ import annotations

import json
from typing import Any

from rsi_common.harness import Harness
from rsi_common.kernel import ToolDef, TurnResult, run_turn
from rsi_common.kernel.components.prompt import SCHEMA_INSTRUCTION
from rsi_common.kernel.testing import ScriptedModel, text_response
from rsi_common.llm import ModelRequest
from tests.unit.kernel.helpers import NO_RETRY, harness_with, make_plan

PARTS = [("identity", "You are X."), ("rules", "\n\nRule 1."), ("style", "\n\nBe brief.")]


def first_request(harness: Harness | None = None, **plan_kw: Any) -> tuple[ModelRequest, TurnResult]:
    model = ScriptedModel([text_response("ok")])
    plan_kw.setdefault("system_parts", PARTS)
    plan_kw.setdefault("tools", [])
    result = run_turn(make_plan(input="hello", **plan_kw), harness, model, retry=NO_RETRY)
    return model.requests[0], result


def test_h0_system_is_the_host_parts_and_volatile_blocks_go_to_the_turn_context() -> None:
    req, result = first_request()
    assert req.system == "You are X.\n\nRule 1.\n\nBe brief."
    assert req.messages[-1]["content"] == (
        "<turn_context>\nCurrent date and time (UTC): 2023-11-14 22:13\n</turn_context>\n\nhello"
    )
    assert "prompt.system.params.schema_instruction" not in result.params_read
    assert "prompt.system.params.turn_notes" not in result.params_read


def test_part_overrides_delete_and_replace() -> None:
    h = harness_with({"prompt.system.params.part_overrides": {"identity": None, "rules": "\n\nRule 2."}})
    req, _ = first_request(h)
    assert req.system == "\n\nRule 2.\n\nBe brief."


def test_part_order_is_a_stable_rank_sort() -> None:
    h = harness_with({"prompt.system.params.part_order": ["style", "rules"]})
    req, _ = first_request(h)
    assert req.system == "\n\nBe brief.\n\nRule 1.You are X."


def test_extra_blocks_strings_objects_and_empty_ones() -> None:
    blocks = ["Use tables.", {"id": "fmt", "text": "\nCite sources."}, "", {"id": "x", "text": ""}, 7]
    h = harness_with(
        {"prompt.system.params.extra_blocks": blocks, "prompt.system.params.part_order": ["fmt"]}
    )
    req, result = first_request(h)
    assert req.system == "\nCite sources.You are X.\n\nRule 1.\n\nBe brief.\n\nUse tables."
    assert "prompt.system.params.extra_blocks" in result.params_read


def test_schema_instruction_only_with_a_schema() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    req, result = first_request(output_schema=schema)
    assert req.system.endswith(SCHEMA_INSTRUCTION + json.dumps(schema, indent=2, ensure_ascii=False))
    assert req.output_schema == schema
    assert "prompt.system.params.schema_instruction" in result.params_read
    off, _ = first_request(
        harness_with({"prompt.system.params.schema_instruction": False}), output_schema=schema
    )
    assert "Output format" not in off.system


def chunks() -> list[dict[str, Any]]:
    return [
        {
            "key": "currency",
            "source": "profile",
            "content": "EUR",
            "relevance_score": 1.0,
            "metadata": {},
            "pinned": True,
        },
        {
            "key": "region",
            "source": "notes",
            "content": "EU",
            "relevance_score": 0.4,
            "metadata": {},
            "pinned": False,
        },
    ]


class StaticMemory:
    def retrieve(self, query: str, timeout_s: float) -> list[dict[str, Any]]:
        return chunks()


def test_pinned_facts_are_stable_and_retrieved_memory_is_volatile() -> None:
    req, _ = first_request(memory=StaticMemory(), turn_notes=["n1", "n2"])
    assert req.system.endswith("\n\n# Pinned facts\n- currency: EUR")
    ctx = req.messages[-1]["content"]
    assert ctx == (
        "<turn_context>\nCurrent date and time (UTC): 2023-11-14 22:13\n\n"
        "Relevant memory:\n- [notes] region: EU\n\nNotes for this turn:\n- n1\n- n2\n"
        "</turn_context>\n\nhello"
    )


def test_volatile_placement_system_and_switches() -> None:
    h = harness_with({"prompt.system.params.volatile_placement": "system"})
    req, _ = first_request(h, turn_notes=["n1"])
    assert req.system.endswith(
        "\n\nCurrent date and time (UTC): 2023-11-14 22:13\n\nNotes for this turn:\n- n1"
    )
    assert req.messages[-1]["content"] == "hello"
    h = harness_with(
        {
            "prompt.system.params.datetime": False,
            "prompt.system.params.turn_notes": False,
            "prompt.system.params.memory_blocks": False,
        }
    )
    req, result = first_request(h, memory=StaticMemory(), turn_notes=["n1"])
    assert req.messages[-1]["content"] == "hello" and "Pinned" not in req.system
    assert "prompt.system.params.volatile_placement" not in result.params_read


def test_datetime_comes_from_the_turn_clock() -> None:
    req, _ = first_request(clock=0.0)
    assert "Current date and time (UTC): 1970-01-01 00:00" in req.messages[-1]["content"]


def test_deferred_tools_are_listed_in_registry_order() -> None:
    tools = [
        ToolDef("search_crm", "Find CRM records.\nSecond line.", core=False, executor=lambda _i: "x"),
        ToolDef("core_tool", "Always there.", executor=lambda _i: "y"),
        ToolDef("send_mail", "Send an e-mail.", core=False, executor=lambda _i: "z"),
    ]
    req, _ = first_request(tools=tools)
    assert req.system.endswith(
        "\n\n# More tools (activate with ToolSearch)\n"
        "- search_crm: Find CRM records.\n- send_mail: Send an e-mail."
    )
    assert [t["name"] for t in req.tools] == ["core_tool", "ToolSearch"]
