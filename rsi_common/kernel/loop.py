"""The loop of K0 — fixed stage order (docs/formats.md §7.2).

context → prompt → client_tool → guard → config → call → parse → tools → control. Each stage is
one function of ``(rt, hooks, …)``; :func:`run_loop` strings them together and returns the end of
the turn as an :class:`End`. Stages raise :class:`~rsi_common.kernel.ledger.TurnStop` to end the
turn early (cancel, model failure, cost budget).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from rsi_common.kernel.events import ToolCall, ToolResultEvent
from rsi_common.kernel.ledger import TurnStop
from rsi_common.kernel.messages import canonical, fix_interrupted, response_text, tool_uses, with_turn_context
from rsi_common.kernel.runner import ToolRunner
from rsi_common.kernel.types import Decision, ParsedStep, ToolDef, TurnStatus
from rsi_common.llm import ModelRequest

if TYPE_CHECKING:
    from rsi_common.kernel.components.base import Component
    from rsi_common.kernel.components.protocols import (
        ConfigHooks,
        ContextHooks,
        ControlHooks,
        OutputHooks,
        PromptHooks,
        ToolHooks,
    )
    from rsi_common.kernel.runtime import TurnRuntime
    from rsi_common.llm import ModelResponse

__all__ = ["STATUS_OF", "End", "Hooks", "accept_input", "main_steps", "run_loop"]

STATUS_OF: dict[str, tuple[TurnStatus, str]] = {
    "complete": ("completed", "COMPLETED"),
    "suspend": ("suspended", "MAX_ITERATIONS"),
    "escalate": ("blocked", "USER_INPUT_REQUIRED"),
    "error": ("failed", "AGENT_ERROR"),
}
"""decision → (status, default termination reason) (docs/formats.md §7.3)."""


@dataclass(frozen=True)
class End:
    """How the turn ended: status, termination reason, a message and the error class (if any)."""

    status: TurnStatus
    reason: str
    message: str = ""
    error_class: str = ""


@dataclass
class Hooks:
    """The enabled components grouped by the stage that calls them (manifest order kept)."""

    prompt: Component
    control: Component
    output: Component
    context: list[Component] = field(default_factory=list)
    tools: list[Component] = field(default_factory=list)
    memory: list[Component] = field(default_factory=list)
    config: list[Component] = field(default_factory=list)

    @classmethod
    def of(cls, components: list[Component]) -> Hooks:
        """Group ``components``; raises ``ValueError`` when a required kind has none."""
        by_kind: dict[str, list[Component]] = {}
        for comp in components:
            by_kind.setdefault(comp.KIND, []).append(comp)
        for kind in ("prompt", "control_flow", "output_plumbing"):
            if not by_kind.get(kind):
                raise ValueError(f"the harness has no enabled {kind} component")
        return cls(
            prompt=by_kind["prompt"][0],
            control=by_kind["control_flow"][0],
            output=by_kind["output_plumbing"][0],
            context=by_kind.get("context_mgmt", []),
            tools=by_kind.get("client_tool", []),
            memory=by_kind.get("memory", []),
            config=by_kind.get("config", []),
        )


def _resumes(messages: list[dict[str, Any]], turn_input: object) -> bool:
    """The input answers every tool use of the last history message: a resumed slice
    (docs/runtime/subagents.md#wait-yield-and-resume), whose results are the input, not ``[interrupted]``."""
    if not messages or not isinstance(turn_input, list):
        return False
    uses = {str(u.get("id")) for u in tool_uses(messages[-1])}
    answered = {str(b.get("tool_use_id")) for b in turn_input
                if isinstance(b, dict) and b.get("type") == "tool_result"}
    return bool(uses) and uses == answered


def accept_input(rt: TurnRuntime) -> None:
    """Fix unanswered tool uses in history (except those a resume input answers), then append the
    input as a user message."""
    if _resumes(rt.messages, rt.plan.input):
        rt.messages = [*fix_interrupted(rt.messages[:-1]), rt.messages[-1]]
    else:
        rt.messages = fix_interrupted(rt.messages)
    rt.turn_start = len(rt.messages)
    rt.messages.append({"role": "user", "content": rt.plan.input})


def stage_context(rt: TurnRuntime, hooks: Hooks) -> None:
    """Stage 1: ``before_call`` of every context component."""
    for comp in hooks.context:
        rt.fire(comp)
        cast("ContextHooks", comp).before_call(rt)


def stage_prompt(rt: TurnRuntime, hooks: Hooks) -> None:
    """Stage 2: ``prompt.build`` → system text and turn context."""
    rt.fire(hooks.prompt)
    rt.system, rt.turn_context = cast("PromptHooks", hooks.prompt).build(rt)


def stage_client_tool(rt: TurnRuntime, hooks: Hooks, runner: ToolRunner | None) -> None:
    """Stage 3: the request tools (empty without a tool runner); event ``system.built``."""
    exposed: list[ToolDef] = []
    if runner is not None:
        if hooks.tools:
            names: set[str] = set()
            for comp in hooks.tools:
                rt.fire(comp)
                names |= {t.name for t in cast("ToolHooks", comp).exposed_tools(rt)}
            exposed = [t for t in rt.tools if t.name in names]
        else:
            exposed = [t for t in rt.tools if rt.tools.is_activated(t.name)]
    rt.request_tools = [t.model_view() for t in exposed]
    rt.tools_exposed = rt.tools_exposed or bool(exposed)
    rt.emit("system.built", system_chars=len(rt.system), tools=len(exposed),
            turn_context_chars=len(rt.turn_context), harness_version=rt.harness_version)


def stage_guard(rt: TurnRuntime, hooks: Hooks) -> End | None:
    """Stage 4: ``ensure_fits`` of every context component; a refusal ends the turn."""
    for comp in hooks.context:
        if not cast("ContextHooks", comp).ensure_fits(rt):
            est = rt.estimate_tokens(with_context=True)
            rt.emit("guard.rejected", estimate=est, window=rt.config.context_window_budget)
            return End("failed", "CONTEXT_GUARD",
                       f"the request (~{est} tokens) does not fit the context window "
                       f"({rt.config.context_window_budget} tokens) with headroom for the reply")
    return None


def build_request(rt: TurnRuntime) -> ModelRequest:
    """The main request; the turn context goes into a copy of the latest user message."""
    return ModelRequest(
        model=rt.plan.model or str(getattr(rt.caller.client, "model", "")),
        system=rt.system,
        messages=with_turn_context(rt.messages, rt.turn_context),
        tools=rt.request_tools,
        max_tokens=rt.config.max_tokens,
        temperature=rt.config.temperature,
        thinking_level=rt.config.thinking_level,
        output_schema=rt.config.output_schema,
        seed=rt.seed,
    )


def stage_config(rt: TurnRuntime, hooks: Hooks, request: ModelRequest) -> ModelRequest:
    """Stage 5: ``apply_request`` of every enabled config component."""
    for comp in hooks.config:
        rt.fire(comp)
        request = cast("ConfigHooks", comp).apply_request(rt, request)
    return request


def _append_response(rt: TurnRuntime, response: ModelResponse) -> None:
    rt.messages.append(response.message())
    rt.final_text = response_text(response.content)


def stage_call(rt: TurnRuntime, request: ModelRequest) -> ModelResponse:
    """Stage 6: the main model call (retries, ledger); appends the assistant message. With a host
    event callback the call streams (:mod:`rsi_common.kernel.events`)."""
    rt.caller.step = rt.iteration
    try:
        response = rt.call_model(request, "main")
    except TurnStop as stop:
        if stop.response is not None:  # the call that crossed the cost budget still counts
            _append_response(rt, stop.response)
        raise
    _append_response(rt, response)
    return response


def stage_parse(rt: TurnRuntime, hooks: Hooks, response: ModelResponse) -> ParsedStep:
    """Stage 7: ``output.parse``."""
    rt.fire(hooks.output)
    step = cast("OutputHooks", hooks.output).parse(rt, response)
    rt.final_text = step.final_text
    return step


def _runner_settings(rt: TurnRuntime, hooks: Hooks) -> tuple[str, int]:
    if not hooks.tools:
        return "sequential", 1
    return cast("ToolHooks", hooks.tools[0]).tool_runner_settings()


def stage_tools(rt: TurnRuntime, hooks: Hooks, runner: ToolRunner | None, step: ParsedStep) -> bool:
    """Stage 8: run pending calls, append one user message of results (call order); True if tools ran."""
    rt.step_call_sets.append(sorted(canonical([c.get("name"), c.get("input")]) for c in step.tool_calls))
    if not step.tool_calls or runner is None:
        return False
    executor, concurrency = _runner_settings(rt, hooks)
    exposed = {str(t.get("name")) for t in rt.request_tools}
    for call in step.tool_calls:
        rt.caller.emit(ToolCall(str(call.get("id", "")), str(call.get("name", "")), call.get("input"),
                                rt.iteration))
    executed = runner.run(step.tool_calls, exposed, executor=executor, max_concurrency=concurrency)
    for done in executed:
        rt.caller.emit(ToolResultEvent(done.tool_use_id, done.name, done.content, done.is_error,
                                       rt.iteration))
    if any(e.pending is not None for e in executed):
        ran = [e for e in executed if e.pending is None]
        rt.pending = {"calls": [e.tool_use_id for e in executed],
                      "results": {e.tool_use_id: e.result_block() for e in ran},
                      "waits": {e.tool_use_id: e.pending for e in executed if e.pending is not None}}
        rt.tool_calls_run += len(ran)
        if rt.capture is not None and ran:
            rt.capture.tool_batch(ran)
        raise TurnStop("suspended", "AWAITING_CHILDREN", f"{len(rt.pending['waits'])} wait(s) pending")
    rt.messages.append({"role": "user", "content": [e.result_block() for e in executed]})
    rt.tool_calls_run += len(executed)
    rt.tool_errors += sum(1 for e in executed if e.is_error)
    rt.last_tool_error = executed[-1].is_error
    if rt.capture is not None:
        rt.capture.tool_batch(executed)
    return True


def stage_control(rt: TurnRuntime, hooks: Hooks, step: ParsedStep, tools_ran: bool) -> Decision:
    """Stage 9: ``control_flow.decide`` — the only decision point."""
    rt.fire(hooks.control)
    return cast("ControlHooks", hooks.control).decide(rt, step, tools_ran)


def _end_of(decision: Decision) -> End:
    status, default_reason = STATUS_OF.get(decision.action, ("failed", "KERNEL_ERROR"))
    return End(status, decision.reason or default_reason, decision.message)


def run_loop(rt: TurnRuntime, hooks: Hooks, runner: ToolRunner | None) -> End:
    """Accept the input and iterate the stages until a decision other than continue or a limit."""
    accept_input(rt)
    try:
        while True:
            stage_context(rt, hooks)
            stage_prompt(rt, hooks)
            stage_client_tool(rt, hooks, runner)
            rejected = stage_guard(rt, hooks)
            if rejected is not None:
                return rejected
            request = stage_config(rt, hooks, build_request(rt))
            response = stage_call(rt, request)
            step = stage_parse(rt, hooks, response)
            tools_ran = stage_tools(rt, hooks, runner, step)
            decision = stage_control(rt, hooks, step, tools_ran)
            if decision.action != "continue":
                return _end_of(decision)
            rt.iteration += 1
            if rt.iteration >= rt.config.max_iterations:
                return End("suspended", "MAX_ITERATIONS", f"{rt.iteration} iterations reached max_iterations")
    except TurnStop as stop:
        return End(stop.status, stop.reason, stop.message, stop.error_class)
    except Exception as exc:  # a component or kernel bug fails the turn, never the host
        rt.emit("kernel.error", error=type(exc).__name__)
        return End("failed", "KERNEL_ERROR", f"{type(exc).__name__}: {exc}"[:500], type(exc).__name__)


def main_steps(rt: TurnRuntime) -> int:
    """Main model calls that returned a response."""
    return sum(1 for r in rt.ledger.records if r.purpose == "main" and not r.error)
