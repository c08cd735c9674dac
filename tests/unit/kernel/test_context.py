"""``StandardContextComponent`` (docs/formats.md §5.6 *Context*): retrieval, prune, compaction, guard."""

from __future__ import annotations

import threading
from typing import Any

from rsi_common.kernel import run_turn
from rsi_common.kernel.components.context import SUMMARY_PREFIX
from rsi_common.kernel.testing import ScriptedModel, text_response
from rsi_common.llm import COMPACTION_SYSTEM_PROMPT
from tests.unit.kernel.helpers import NO_RETRY, harness_with, live, make_plan


class SlowMemory:
    def __init__(self) -> None:
        self.release = threading.Event()

    def retrieve(self, query: str, timeout_s: float) -> list[dict[str, Any]]:
        self.release.wait(60)  # the test sets it once the turn went on without the retrieval
        return [
            {
                "key": "k",
                "source": "s",
                "content": "late",
                "relevance_score": 1,
                "metadata": {},
                "pinned": True,
            }
        ]


def test_retrieval_timeout_injects_nothing() -> None:
    mem = SlowMemory()
    try:
        h = harness_with({"context.standard.params.retrieval_timeout_s": 0.05})
        result, rec = live(make_plan(input="hi", tools=[], memory=mem), h)
    finally:
        mem.release.set()
    assert any(e["type"] == "memory.timeout" for e in result.events)
    assert result.world is not None and result.world["memory"] == {"present": True, "chunks": None}
    assert "late" not in rec.requests[0].system
    assert "context.standard.params.retrieval_timeout_s" in result.params_read


def test_no_memory_means_no_retrieval_params_read() -> None:
    result, _ = live(make_plan(input="hi", tools=[]))
    assert "context.standard.params.retrieval_timeout_s" not in result.params_read
    assert "memory.archive.params.retrieve" not in result.params_read
    assert "memory.archive.params.archive" not in result.params_read


def big_history(n: int = 3, size: int = 4000) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for i in range(n):
        msgs += [
            {"role": "user", "content": f"question {i}"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "get_sales", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{i}", "content": "x" * size, "is_error": False}
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]},
        ]
    return msgs


def results_of(messages: list[dict[str, Any]]) -> list[Any]:
    return [
        b["content"]
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


def test_cost_prune_keeps_the_most_recent_batch() -> None:
    h = harness_with({"context.standard.params.prune_over_tokens": 2000})
    model = ScriptedModel([text_response("ok")])
    result = run_turn(make_plan(input="next", messages=big_history()), h, model, retry=NO_RETRY)
    contents = results_of(model.requests[0].messages)
    assert contents[:2] == ["[pruned: 4000 characters]"] * 2 and contents[2] == "x" * 4000
    assert "context.standard.params.prune_over_tokens" in result.params_read
    assert result.world is not None and results_of(result.world["state"]["messages"])[0] == "x" * 4000


def test_prune_kwarg_overrides_and_the_param_is_not_read() -> None:
    model = ScriptedModel([text_response("ok")])
    result = run_turn(
        make_plan(input="next", messages=big_history(), kwargs={"prune_over_tokens": 0}),
        harness_with({"context.standard.params.prune_over_tokens": 10}),
        model,
        retry=NO_RETRY,
    )
    assert results_of(model.requests[0].messages) == ["x" * 4000] * 3
    assert "context.standard.params.prune_over_tokens" not in result.params_read


def test_capacity_compaction_replaces_earlier_messages() -> None:
    model = ScriptedModel([text_response("the user asked about sales"), text_response("ok")])
    plan = make_plan(
        input="next", messages=big_history(), kwargs={"context_window_budget": 4000, "prune_over_tokens": 0}
    )
    result = run_turn(plan, None, model, retry=NO_RETRY)
    compact, main = model.requests
    assert compact.system == COMPACTION_SYSTEM_PROMPT and compact.tools == []
    assert main.messages[0] == {"role": "user", "content": SUMMARY_PREFIX + "the user asked about sales"}
    assert len(main.messages) == 2
    assert [r["purpose"] for r in result.ledger] == ["compact", "main"]
    assert result.policy_tokens == sum(r["input_tokens"] + r["output_tokens"] for r in result.ledger)
    assert result.world is not None and result.world["state"]["messages"] == big_history()
    assert "the user asked about sales" not in str(result.world)
    assert {"context.standard.params.proactive_ratio", "context.standard.params.target_ratio"} <= set(
        result.params_read
    )


def test_guard_rejects_a_request_that_cannot_fit() -> None:
    model = ScriptedModel([text_response("never")])
    plan = make_plan(input="y" * 9000, tools=[], kwargs={"context_window_budget": 3000})
    result = run_turn(plan, None, model, retry=NO_RETRY)
    assert (result.status, result.termination_reason) == ("failed", "CONTEXT_GUARD")
    assert result.error.startswith("CONTEXT_GUARD: ") and model.requests == []
    off = run_turn(
        plan,
        harness_with({"context.standard.params.guard": False}),
        ScriptedModel([text_response("a")]),
        retry=NO_RETRY,
    )
    assert off.status == "completed"


def test_guard_headroom_is_capped_by_half_the_window() -> None:
    # window 3000 → headroom min(max(4096, 8192+2048), max(1024, 1500)) = 1500; a small request fits
    model = ScriptedModel([text_response("ok")])
    result = run_turn(
        make_plan(input="hi", tools=[], kwargs={"context_window_budget": 3000}), None, model, retry=NO_RETRY
    )
    assert result.status == "completed"
    assert {"context.standard.params.guard_min_headroom", "context.standard.params.guard_extra"} <= set(
        result.params_read
    )


def test_guard_compacts_once_then_passes() -> None:
    model = ScriptedModel([text_response("short summary"), text_response("ok")])
    h = harness_with({"context.standard.params.proactive_ratio": 100.0})  # no proactive compaction
    plan = make_plan(
        input="next", messages=big_history(), kwargs={"context_window_budget": 4000, "prune_over_tokens": 0}
    )
    result = run_turn(plan, h, model, retry=NO_RETRY)
    assert result.status == "completed" and [r["purpose"] for r in result.ledger] == ["compact", "main"]


def test_compaction_disabled_reads_no_compaction_params() -> None:
    model = ScriptedModel([text_response("ok")])
    result = run_turn(
        make_plan(input="hi", tools=[], kwargs={"enable_compaction": False}), None, model, retry=NO_RETRY
    )
    assert not [p for p in result.params_read if p.startswith("context.standard.")]
