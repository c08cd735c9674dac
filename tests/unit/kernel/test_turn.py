"""Live turns under H0: world capture (docs/formats.md §4.1), trajectory (§7.5), stage order details
(§7.2)."""

from __future__ import annotations

from typing import Any

from rsi_common.kernel import ToolDef, run_turn
from rsi_common.kernel.messages import INTERRUPTED
from rsi_common.kernel.testing import ScriptedModel, text_response, tool_response
from rsi_common.world import SAFE_KWARGS, WORLD_SCHEMA, TurnWorld, validate_world
from tests.unit.kernel.helpers import (
    CLOCK,
    NO_RETRY,
    SECRET,
    TWO_TOOL_INPUT,
    dumps,
    harness_with,
    live,
    make_plan,
    no_sleep,
    sales_tools,
)

HISTORY = [
    {"role": "user", "content": "Hi, I track sales."},
    {"role": "assistant", "content": [{"type": "text", "text": "Hello! How can I help?"}]},
]


class Memory:
    """A host memory provider that records archive calls."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks = chunks
        self.queries: list[str] = []
        self.archived: list[list[dict[str, Any]]] = []

    def retrieve(self, query: str, timeout_s: float) -> list[dict[str, Any]]:
        self.queries.append(query)
        return [dict(c) for c in self.chunks]

    def archive(self, messages: list[dict[str, Any]]) -> None:
        self.archived.append(messages)


def test_live_turn_with_two_tool_calls_captures_the_world() -> None:
    log: list[tuple[str, dict[str, Any]]] = []
    plan = make_plan(
        messages=HISTORY,
        tools=sales_tools(log),
        turn_notes=["The user is in Berlin."],
        metadata={"tenant": "acme", "_private": "x"},
        kwargs={"temperature": 0.2, "max_turn_tokens": 10**9, "enable_prompt_cache": True},
    )
    result, rec = live(plan)
    assert result.status == "completed" and result.termination_reason == "COMPLETED"
    assert [name for name, _ in log] == ["get_sales", "get_weather"]
    assert result.steps == 3 and len(rec.requests) == 3
    world = result.world
    assert world is not None and validate_world(world) == world
    assert world["schema"] == WORLD_SCHEMA and world["replayable"] is True
    assert world["clock"] == CLOCK and world["created_at"] == "2023-11-14T22:13:20Z"
    assert world["plan"]["system_parts"] == [["identity", "You are a helpful analyst."]]
    assert world["plan"]["turn_notes"] == ["The user is in Berlin."]
    assert world["plan"]["kwargs"] == {"temperature": 0.2, "enable_prompt_cache": True}
    assert set(world["plan"]["kwargs"]) <= set(SAFE_KWARGS)
    assert (world["plan"]["max_tokens"], world["plan"]["context_window_budget"]) == (8192, 200_000)
    assert world["state"]["messages"] == HISTORY
    assert world["state"]["metadata"] == {"tenant": "acme"}
    assert world["input"] == TWO_TOOL_INPUT
    assert [d["name"] for d in world["tools"]["defs"]] == ["get_sales", "get_weather"]
    calls = world["tools"]["calls"]
    assert [(c["name"], c["input"]) for c in calls] == [
        ("get_sales", {"region": "EU"}),
        ("get_weather", {"city": "Paris"}),
    ]
    assert calls[0]["content"] == "region: EU\nrevenue: 12 EUR" and calls[0]["is_error"] is False
    uses = [
        b["id"]
        for m in result.transcript
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    assert [c["tool_use_id"] for c in calls] == uses
    outcome = world["outcome"]
    assert outcome["final_text"] == result.answer and "revenue" in result.answer
    assert outcome["status"] == "completed" and outcome["steps"] == 3
    assert outcome["policy_tokens"] == result.policy_tokens > 0
    assert outcome["transcript"][0] == {"role": "user", "content": TWO_TOOL_INPUT}
    assert TurnWorld("w_x", world).replayable


def test_no_secret_system_prompt_or_tool_list_in_world_or_trajectory() -> None:
    plan = make_plan(turn_notes=["note"])
    harness = harness_with({"prompt.system.params.extra_blocks": ["Answer in tables."]})
    result, rec = live(plan, harness)
    assert result.world is not None
    for record in (result.world, result.trajectory, result.ledger, result.events):
        assert SECRET not in dumps(record)
    assert SECRET not in repr(plan)
    world_text = dumps(result.world)
    assert "Current date and time" not in world_text  # harness-built system text / turn context
    assert "Answer in tables." in rec.requests[0].system and "Answer in tables." not in world_text
    assert "request_tools" not in world_text and "cache_points" not in world_text


def test_trajectory_record_has_no_content() -> None:
    result, _ = live(make_plan())
    traj = result.trajectory
    assert set(traj) == {
        "trajectory_id",
        "agent_id",
        "io_id",
        "interaction_id",
        "harness_version",
        "harness_name",
        "lineage",
        "provider",
        "model",
        "thinking_level",
        "status",
        "termination_reason",
        "error",
        "steps",
        "policy_tokens",
        "usage_by_purpose",
        "components_fired",
        "params_read",
        "final_text_chars",
        "world_bytes",
        "created_at",
    }
    text = dumps(traj)
    assert "revenue" not in text and "Paris" not in text and "summarise" not in text
    assert traj["steps"] == {"model_calls": 3, "iterations": 3, "tool_calls": 2, "tool_errors": 0}
    assert traj["lineage"] == "h0" and traj["harness_name"] == "h0"
    assert traj["usage_by_purpose"]["main"]["calls"] == 3
    assert traj["world_bytes"] == result.world["bytes"] if result.world else False
    assert traj["params_read"] == sorted(traj["params_read"]) == result.params_read
    assert "prompt.system" in traj["components_fired"]


def test_turn_context_goes_into_a_copy_of_the_latest_user_message() -> None:
    result, rec = live(make_plan(input="Summarise: a, b", tools=[], turn_notes=["be kind"]))
    first = rec.requests[0].messages[-1]
    assert first["content"].startswith("<turn_context>\nCurrent date and time (UTC): 2023-11-14 22:13")
    assert "Notes for this turn:\n- be kind\n</turn_context>\n\nSummarise: a, b" in first["content"]
    assert result.transcript[0] == {"role": "user", "content": "Summarise: a, b"}


def test_turn_context_follows_tool_results_in_a_result_message() -> None:
    _, rec = live(make_plan())
    last = rec.requests[1].messages[-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text"]
    assert last[1]["text"].startswith("<turn_context>\n")


def test_unanswered_tool_use_in_history_gets_an_interrupted_result() -> None:
    history = [
        {"role": "user", "content": "look up"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t9", "name": "get_sales", "input": {}}],
        },
    ]
    model = ScriptedModel([text_response("ok")])
    result = run_turn(make_plan(input="hello", messages=history), None, model, retry=NO_RETRY)
    msgs = model.requests[0].messages
    assert msgs[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t9",
        "content": INTERRUPTED,
        "is_error": True,
    }
    assert result.world is not None and result.world["state"]["messages"] == history


def test_memory_retrieval_is_recorded_and_archived_live() -> None:
    mem = Memory(
        [
            {
                "key": "currency",
                "source": "profile",
                "content": "EUR",
                "relevance_score": 0.9,
                "metadata": {},
                "pinned": True,
            },
            {
                "key": "last_region",
                "source": "notes",
                "content": "EU",
                "relevance_score": 0.5,
                "metadata": {},
                "pinned": False,
            },
        ]
    )
    result, rec = live(make_plan(memory=mem))
    assert mem.queries == [TWO_TOOL_INPUT]
    assert result.world is not None
    assert result.world["memory"] == {"present": True, "chunks": mem.chunks}
    assert "# Pinned facts\n- currency: EUR" in rec.requests[0].system
    assert "Relevant memory:\n- [notes] last_region: EU" in rec.requests[0].messages[-1]["content"]
    assert len(mem.archived) == 1 and mem.archived[0][0]["content"] == TWO_TOOL_INPUT


def test_a_credential_in_the_input_refuses_the_world_not_the_turn() -> None:
    result, _ = live(make_plan(input=f"my key is {SECRET}", tools=[]))
    assert result.status == "completed" and result.world is None
    assert any(e["type"] == "world.refused" for e in result.events)


def test_record_world_off() -> None:
    result, _ = live(make_plan(), record_world=False)
    assert result.world is None and result.trajectory["world_bytes"] is None


def test_host_live_flag_is_ignored_on_non_builtin_tools() -> None:
    tool = ToolDef("lookup", "Look up.", live=True, executor=lambda _i: "x: 1")
    result, _ = live(make_plan(input="use lookup", tools=[tool]))
    assert result.world is not None and result.world["tools"]["defs"][0]["live"] is False


def test_executor_exception_becomes_an_error_result() -> None:
    def boom(_inp: dict[str, Any]) -> str:
        raise RuntimeError("backend down")

    model = ScriptedModel([tool_response("lookup", {}), text_response("It failed."), text_response("Sorry.")])
    result = run_turn(
        make_plan(input="x", tools=[ToolDef("lookup", executor=boom)]), None, model, retry=NO_RETRY
    )
    assert result.world is not None
    call = result.world["tools"]["calls"][0]
    assert call["content"] == "RuntimeError: backend down" and call["is_error"] is True
    assert result.status == "completed"


def test_unknown_and_unexposed_tools_get_kernel_errors() -> None:
    deferred = ToolDef("hidden", "Hidden tool.", core=False, executor=lambda _i: "x")
    model = ScriptedModel(
        [
            tool_response("nope", {}, tool_use_id="a"),
            tool_response("hidden", {}, tool_use_id="b"),
            text_response("done"),
        ]
    )
    result = run_turn(
        make_plan(input="x", tools=[ToolDef("t", executor=lambda _i: "y"), deferred]),
        None,
        model,
        retry=NO_RETRY,
        sleep=no_sleep,
    )
    assert result.world is not None
    contents = [c["content"] for c in result.world["tools"]["calls"]]
    assert contents == [
        "[kernel] unknown tool 'nope'",
        "[kernel] tool 'hidden' is not available in this step",
    ]
