"""Kernel limits (docs/formats.md §7.3) — no harness can change them — the ledger and c(τ) (§7.4)."""

from __future__ import annotations

from typing import Any

import pytest

from rsi_common.errors import InvalidInput, ModelAuthError, ModelTransientError
from rsi_common.harness import Harness, build_harness, h0
from rsi_common.kernel import RetryPolicy, ToolDef, TurnResult, run_turn
from rsi_common.kernel.components.base import Component
from rsi_common.kernel.testing import ScriptedModel, text_response, tool_response
from tests.unit.kernel.helpers import NO_RETRY, make_plan, no_sleep

LIMIT_PARAMS = {
    "max_iterations": 1000,
    "max_turn_tokens": 10**12,
    "model_retries": 50,
    "max_tokens": 5,
    "context_window_budget": 1,
    "retries": 50,
}


def meddling_harness() -> Harness:
    """Every component sets every kernel limit as a param (and nothing is locked)."""
    manifest = h0().manifest.to_json()
    manifest["locked"] = []
    for comp in manifest["components"]:
        comp["params"] = {**comp.get("params", {}), **LIMIT_PARAMS}
    return build_harness(manifest, {})


def tool() -> ToolDef:
    return ToolDef("lookup", "Look up.", executor=lambda _i: "a: 1")


def endless(n: int = 40) -> ScriptedModel:
    return ScriptedModel([tool_response("lookup", {"q": i}, tool_use_id=f"t{i}") for i in range(n)])


@pytest.mark.parametrize("harness", [None, meddling_harness()], ids=["h0", "meddling"])
def test_max_iterations_default_is_20(harness: Harness | None) -> None:
    model = endless()
    result = run_turn(make_plan(input="x", tools=[tool()]), harness, model, retry=NO_RETRY)
    assert (result.status, result.termination_reason, result.steps) == ("suspended", "MAX_ITERATIONS", 20)
    assert not [p for p in result.params_read if p.split(".params.")[1] in LIMIT_PARAMS]


def test_max_iterations_kwarg() -> None:
    result = run_turn(
        make_plan(input="x", tools=[tool()], kwargs={"max_iterations": 2}),
        meddling_harness(),
        endless(),
        retry=NO_RETRY,
    )
    assert (result.termination_reason, result.steps) == ("MAX_ITERATIONS", 2)


@pytest.mark.parametrize("harness", [None, meddling_harness()], ids=["h0", "meddling"])
def test_max_turn_tokens_escalates_with_cost_budget(harness: Harness | None) -> None:
    model = ScriptedModel(
        [tool_response("lookup", {}, input_tokens=60, output_tokens=10), text_response("x")]
    )
    result = run_turn(
        make_plan(input="x", tools=[tool()], kwargs={"max_turn_tokens": 50}), harness, model, retry=NO_RETRY
    )
    assert (result.status, result.termination_reason) == ("blocked", "COST_BUDGET")
    assert result.steps == 1 and result.policy_tokens == 70
    assert result.transcript[-1]["role"] == "assistant"  # the crossing call stays in history


@pytest.mark.parametrize("harness", [None, meddling_harness()], ids=["h0", "meddling"])
def test_model_retries_then_model_error(harness: Harness | None) -> None:
    sleeps: list[float] = []
    model = ScriptedModel([ModelTransientError("503")] * 4 + [text_response("late")])
    result = run_turn(make_plan(input="x", tools=[]), harness, model, sleep=sleeps.append)
    assert (result.status, result.termination_reason) == ("failed", "MODEL_ERROR")
    assert sleeps == [1.0, 2.0, 4.0] and len(model.requests) == 4
    assert result.error.startswith("MODEL_ERROR: ModelTransientError")
    assert result.trajectory["error"] == "MODEL_ERROR (ModelTransientError)"
    assert len(result.ledger) == 4 and all(r["error"] for r in result.ledger)


def test_three_retries_then_success() -> None:
    model = ScriptedModel([ModelTransientError("429")] * 3 + [text_response("ok")])
    result = run_turn(make_plan(input="x", tools=[]), None, model, retry=RetryPolicy(backoff_s=0.0))
    assert result.status == "completed" and result.answer == "ok" and result.steps == 1
    assert [bool(r["error"]) for r in result.ledger] == [True, True, True, False]
    assert result.usage["calls"] == 1


def test_auth_errors_are_not_retried() -> None:
    model = ScriptedModel([ModelAuthError("bad key"), text_response("never")])
    result = run_turn(make_plan(input="x", tools=[]), None, model, sleep=no_sleep)
    assert result.termination_reason == "MODEL_ERROR" and len(model.requests) == 1


def test_default_max_tokens_and_temperature_and_kwarg_overrides() -> None:
    model = ScriptedModel([text_response("a"), text_response("b")])
    run_turn(make_plan(input="x", tools=[]), meddling_harness(), model, retry=NO_RETRY)
    run_turn(
        make_plan(
            input="x", tools=[], kwargs={"max_tokens": 100, "temperature": 0.0, "thinking_level": "low"}
        ),
        None,
        model,
        retry=NO_RETRY,
    )
    a, b = model.requests
    assert (a.max_tokens, a.temperature, a.thinking_level, a.seed) == (8192, 0.7, None, None)
    assert (b.max_tokens, b.temperature, b.thinking_level) == (100, 0.0, "low")


def test_bad_kwargs_are_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        run_turn(
            make_plan(input="x", kwargs={"max_iterations": "many"}), None, ScriptedModel(), retry=NO_RETRY
        )


def test_c_tau_counts_every_purpose_and_billing_only_main() -> None:
    history = [{"role": "user", "content": "y" * 8000}, {"role": "assistant", "content": "ok"}]
    model = ScriptedModel(
        [
            text_response("summary", input_tokens=1000, output_tokens=50),
            text_response("answer", input_tokens=200, output_tokens=20),
        ]
    )
    result = run_turn(
        make_plan(input="x", tools=[], messages=history, kwargs={"context_window_budget": 3000}),
        None,
        model,
        retry=NO_RETRY,
    )
    assert [r["purpose"] for r in result.ledger] == ["compact", "main"]
    assert result.policy_tokens == 1270
    assert result.usage == {
        "calls": 1,
        "input_tokens": 200,
        "output_tokens": 20,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    assert result.trajectory["usage_by_purpose"] == {
        "compact": {"calls": 1, "input_tokens": 1000, "output_tokens": 50},
        "main": {"calls": 1, "input_tokens": 200, "output_tokens": 20},
    }


def test_a_component_exception_is_a_kernel_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from rsi_common.kernel.components.control import StandardControlComponent

    def boom(self: Component, *_a: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(StandardControlComponent, "decide", boom)
    result: TurnResult = run_turn(
        make_plan(input="x", tools=[]), None, ScriptedModel([text_response("a")]), retry=NO_RETRY
    )
    assert (result.status, result.termination_reason) == ("failed", "KERNEL_ERROR")
    assert result.error == "KERNEL_ERROR: RuntimeError: bug"
