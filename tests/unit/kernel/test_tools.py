"""``ToolExposureComponent``, ``ToolSearch`` and the tool runner's executors (docs/formats.md §5.6
*Tools*, §7.1)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rsi_common.kernel import TOOL_SEARCH, ToolDef, ToolRegistry, ToolRunner, run_turn
from rsi_common.kernel.testing import ScriptedModel, text_response, tool_response
from rsi_common.llm import ModelResponse, Usage
from tests.unit.kernel.helpers import NO_RETRY, harness_with, make_plan


def names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["name"] for t in tools]


def deferred_tools() -> list[ToolDef]:
    return [
        ToolDef(
            "crm_list",
            "List CRM objects (guide).",
            core=False,
            guide=True,
            family="crm",
            executor=lambda _i: "objects: accounts",
        ),
        ToolDef(
            "crm_get",
            "Get a CRM account by id.",
            core=False,
            family="crm",
            executor=lambda _i: "account: ACME",
        ),
        ToolDef("echo", "Echo the input.", executor=lambda i: str(i)),
    ]


def test_tool_search_activates_deferred_tools() -> None:
    model = ScriptedModel([tool_response(TOOL_SEARCH, {"query": "CRM account"}), text_response("ok")])
    result = run_turn(make_plan(input="x", tools=deferred_tools()), None, model, retry=NO_RETRY)
    first, second = model.requests
    assert names(first.tools) == ["crm_list", "echo", "ToolSearch"]  # crm_list exposed by gating
    assert names(second.tools) == ["crm_list", "crm_get", "echo", "ToolSearch"]
    assert result.world is not None
    call = result.world["tools"]["calls"][0]
    assert call["content"] == "Activated tools: crm_get" and call["is_error"] is False
    defs = {d["name"]: d for d in result.world["tools"]["defs"]}
    assert defs["ToolSearch"]["live"] is True and defs["crm_get"]["activated"] is False


def test_no_tool_search_without_deferred_tools() -> None:
    model = ScriptedModel([text_response("ok")])
    run_turn(
        make_plan(input="x", tools=[ToolDef("echo", executor=lambda _i: "e")]), None, model, retry=NO_RETRY
    )
    assert names(model.requests[0].tools) == ["echo"]


def test_gate_reachability_off_hides_the_guide() -> None:
    model = ScriptedModel([text_response("ok")])
    result = run_turn(
        make_plan(input="x", tools=deferred_tools()),
        harness_with({"tools.exposure.params.gate_reachability": False}),
        model,
        retry=NO_RETRY,
    )
    assert names(model.requests[0].tools) == ["echo", "ToolSearch"]
    assert "tools.exposure.params.gate_reachability" in result.params_read


def test_restore_from_history_activates_used_tools() -> None:
    history = [
        {"role": "user", "content": "get acme"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "h1", "name": "crm_get", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "h1", "content": "account: ACME", "is_error": False}
            ],
        },
    ]
    model = ScriptedModel([text_response("ok")])
    run_turn(make_plan(input="x", tools=deferred_tools(), messages=history), None, model, retry=NO_RETRY)
    assert "crm_get" in names(model.requests[0].tools)
    model = ScriptedModel([text_response("ok")])
    run_turn(
        make_plan(input="x", tools=deferred_tools(), messages=history),
        harness_with({"tools.exposure.params.restore_from_history": False}),
        model,
        retry=NO_RETRY,
    )
    assert "crm_get" not in names(model.requests[0].tools)


def multi_call(*calls: tuple[str, dict[str, Any]]) -> ModelResponse:
    content = [
        {"type": "tool_use", "id": f"c{i}", "name": n, "input": inp} for i, (n, inp) in enumerate(calls)
    ]
    return ModelResponse(content=content, usage=Usage(10, 5), stop_reason="tool_use", model="scripted-1")


def barrier_tools(parties: int, read_only: bool = True) -> tuple[list[ToolDef], list[str]]:
    barrier = threading.Barrier(parties, timeout=60.0)
    order: list[str] = []

    def make(name: str) -> ToolDef:
        def run(_inp: dict[str, Any]) -> str:
            barrier.wait()  # deadlocks (→ BrokenBarrierError) unless the calls run concurrently
            order.append(name)
            return f"{name}: ok"

        return ToolDef(name, executor=run, read_only=read_only)

    return [make(f"t{i}") for i in range(parties)], order


def test_parallel_executor_runs_concurrently_and_keeps_call_order() -> None:
    tools, _ = barrier_tools(3)
    model = ScriptedModel([multi_call(("t2", {}), ("t0", {}), ("t1", {})), text_response("done")])
    h = harness_with({"tools.exposure.params.executor": "parallel"})
    result = run_turn(make_plan(input="x", tools=tools), h, model, retry=NO_RETRY)
    results = model.requests[1].messages[-1]["content"]
    assert [b["tool_use_id"] for b in results if b["type"] == "tool_result"] == ["c0", "c1", "c2"]
    assert [b["content"] for b in results if b["type"] == "tool_result"] == ["t2: ok", "t0: ok", "t1: ok"]
    assert {"tools.exposure.params.executor", "tools.exposure.params.max_concurrency"} <= set(
        result.params_read
    )


def test_partition_runs_read_only_runs_in_parallel_and_writers_alone() -> None:
    tools, order = barrier_tools(2)
    writes: list[str] = []
    tools.append(ToolDef("write", executor=lambda _i: writes.append("w") or "written"))
    model = ScriptedModel([multi_call(("t0", {}), ("t1", {}), ("write", {})), text_response("done")])
    h = harness_with({"tools.exposure.params.executor": "partition"})
    result = run_turn(make_plan(input="x", tools=tools), h, model, retry=NO_RETRY)
    assert result.world is not None
    assert [c["content"] for c in result.world["tools"]["calls"]] == ["t0: ok", "t1: ok", "written"]
    assert sorted(order) == ["t0", "t1"] and writes == ["w"]


@pytest.mark.parametrize("executor", ["sequential", "bogus"])
def test_sequential_and_unknown_executors_do_not_read_max_concurrency(executor: str) -> None:
    tools = [ToolDef("a", executor=lambda _i: "a: 1"), ToolDef("b", executor=lambda _i: "b: 2")]
    model = ScriptedModel([multi_call(("a", {}), ("b", {})), text_response("done")])
    result = run_turn(
        make_plan(input="x", tools=tools),
        harness_with({"tools.exposure.params.executor": executor}),
        model,
        retry=NO_RETRY,
    )
    assert "tools.exposure.params.max_concurrency" not in result.params_read
    assert result.world is not None and [c["name"] for c in result.world["tools"]["calls"]] == ["a", "b"]


def test_executor_params_are_not_read_when_no_call_runs() -> None:
    result = run_turn(make_plan(input="x"), None, ScriptedModel([text_response("ok")]), retry=NO_RETRY)
    assert "tools.exposure.params.executor" not in result.params_read


def test_runner_unit_parallel_order_with_uneven_durations() -> None:
    reg = ToolRegistry()
    done = threading.Event()

    def slow(_i: dict[str, Any]) -> str:
        done.wait(1.0)
        return "slow"

    def fast(_i: dict[str, Any]) -> str:
        done.set()
        return "fast"

    reg.register(ToolDef("slow", executor=slow))
    reg.register(ToolDef("fast", executor=fast))
    out = ToolRunner(reg).run(
        [{"id": "1", "name": "slow", "input": {}}, {"id": "2", "name": "fast", "input": {}}],
        {"slow", "fast"},
        executor="parallel",
        max_concurrency=4,
    )
    assert [(e.tool_use_id, e.content) for e in out] == [("1", "slow"), ("2", "fast")]


def test_no_tools_means_no_tool_runner_and_an_empty_tool_list() -> None:
    model = ScriptedModel([tool_response("ghost", {}), text_response("never")])
    result = run_turn(make_plan(input="x", tools=[]), None, model, retry=NO_RETRY)
    assert model.requests[0].tools == [] and result.steps == 1 and result.status == "completed"
    assert result.world is not None and result.world["tools"]["calls"] == []
