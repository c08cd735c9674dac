"""Live turns: preparation (docs/formats.md §7.1), the loop (§7.2), turn end, trajectory (§7.5) and world
(§4.1).

:func:`run_turn` is what a host calls for every turn; :func:`rsi_common.replay.replay_world` calls
the same function with a rebuilt plan, so live turns and replays share one code path.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from rsi_common.errors import WorldError
from rsi_common.harness import Harness, h0
from rsi_common.kernel.capture import WorldCapture
from rsi_common.kernel.components.registry import instantiate
from rsi_common.kernel.events import EventSink
from rsi_common.kernel.ledger import Ledger, ModelCaller
from rsi_common.kernel.loop import End, Hooks, main_steps, run_loop
from rsi_common.kernel.runner import ToolRunner
from rsi_common.kernel.runtime import TurnRuntime
from rsi_common.kernel.tool_registry import BUILTIN_LIVE_TOOLS, TOOL_SEARCH, ToolRegistry, tool_search_def
from rsi_common.kernel.types import ModelConfig, RetryPolicy, ToolDef, TurnPlan, TurnResult
from rsi_common.stored import safe_reason

if TYPE_CHECKING:
    from rsi_common.kernel.components.base import Component
    from rsi_common.kernel.components.protocols import MemoryHooks, OutputHooks
    from rsi_common.llm import ModelClient

__all__ = ["build_registry", "run_turn", "trajectory_record"]


def build_registry(tools: Sequence[ToolDef]) -> ToolRegistry:
    """Register the plan's tools in order; add ``ToolSearch`` when deferred tools exist
    (docs/formats.md §7.1).

    A definition with ``live=True`` and the name of a kernel built-in is served by the built-in
    (its recorded flags, description and schema are kept — this is how replays register recorded
    built-ins); ``live`` on any other name is cleared.
    """
    registry = ToolRegistry()
    for tool in tools:
        if not tool.name:
            continue
        if tool.live and tool.name in BUILTIN_LIVE_TOOLS:
            builtin = tool_search_def(registry)
            tool = dataclasses.replace(tool, executor=builtin.executor)
        elif tool.live:
            tool = dataclasses.replace(tool, live=False)
        registry.register(tool)
    if registry.deferred() and TOOL_SEARCH not in registry:
        registry.register(tool_search_def(registry))
    return registry


def _contribute(rt: TurnRuntime, components: list[Component]) -> None:
    for comp in components:
        contributed = comp.tools(rt)
        if contributed:
            rt.fire(comp)
        for tool in contributed:
            rt.tools.register(dataclasses.replace(tool, live=False), contributed=True)


def _prepare(plan: TurnPlan, harness: Harness, client: ModelClient, *, record_world: bool, seed: int | None,
             retry: RetryPolicy, sleep: Callable[[float], None], cancelled: Callable[[], bool] | None,
             on_event: EventSink | None = None) -> tuple[TurnRuntime, Hooks, ToolRunner | None]:
    """Preparation in docs/formats.md §7.1 order: components, model caller + ledger, config, runtime,
    contributed
    tools, world capture, tool runner."""
    components = instantiate(harness)
    hooks = Hooks.of(components)
    config = ModelConfig.from_plan(plan)
    caller = ModelCaller(client, Ledger(), retry=retry, sleep=sleep, cancelled=cancelled,
                         max_turn_tokens=config.max_turn_tokens, on_event=on_event)
    rt = TurnRuntime(plan=plan, config=config, caller=caller, tools=build_registry(plan.tools),
                     components=components, harness_version=harness.version,
                     harness_name=harness.manifest.name, seed=seed,
                     messages=[dict(m) for m in plan.messages])
    _contribute(rt, components)
    if record_world:
        rt.capture = WorldCapture(plan, config, harness_version=harness.version,
                                  provider=plan.provider or str(getattr(client, "provider", "")),
                                  model=plan.model or str(getattr(client, "model", "")), registry=rt.tools)
    rt.has_tool_runner = len(rt.tools) > 0
    return rt, hooks, (ToolRunner(rt.tools) if rt.has_tool_runner else None)


def _slice_end(rt: TurnRuntime, hooks: Hooks, end: End) -> None:
    """``memory.on_slice_end``; skipped on replay and after a cancel (replays never write memory)."""
    if rt.is_replay or end.status == "cancelled":
        return
    for comp in hooks.memory:
        rt.fire(comp)
        try:
            cast("MemoryHooks", comp).on_slice_end(rt)
        except Exception as exc:  # a failing memory write never fails a finished turn
            rt.emit("memory.archive_error", error=type(exc).__name__)


def trajectory_record(rt: TurnRuntime, end: End, *, lineage: str, answer: str, world_bytes: int | None,
                      created_at: str) -> dict[str, Any]:
    """The content-free trajectory record (docs/formats.md §7.5)."""
    params = sorted(set().union(*(c.params_read() for c in rt.components))) if rt.components else []
    error = None
    if end.status == "failed":
        error = (end.reason + (f" ({end.error_class})" if end.error_class else ""))[:300]
    return {
        "trajectory_id": "t_" + uuid.uuid4().hex[:24],
        "agent_id": rt.plan.agent_id,
        "io_id": rt.plan.io_id,
        "interaction_id": rt.plan.interaction_id,
        "harness_version": rt.harness_version,
        "harness_name": rt.harness_name,
        "lineage": lineage,
        "provider": rt.plan.provider or str(getattr(rt.caller.client, "provider", "")),
        "model": rt.plan.model or str(getattr(rt.caller.client, "model", "")),
        "thinking_level": rt.config.thinking_level,
        "status": end.status,
        "termination_reason": end.reason,
        "error": error,
        "steps": {"model_calls": sum(1 for r in rt.ledger.records if not r.error),
                  "iterations": rt.iteration + 1, "tool_calls": rt.tool_calls_run,
                  "tool_errors": rt.tool_errors},
        "policy_tokens": rt.ledger.policy_tokens(),
        "usage_by_purpose": rt.ledger.usage_by_purpose(),
        "components_fired": list(rt.fired),
        "params_read": params,
        "final_text_chars": len(answer),
        "world_bytes": world_bytes,
        "created_at": created_at,
    }


def _finish(rt: TurnRuntime, hooks: Hooks, end: End, lineage: str) -> TurnResult:
    answer = cast("OutputHooks", hooks.output).settle(rt.final_text, rt.config.output_schema)
    _slice_end(rt, hooks, end)
    transcript = list(rt.messages[rt.turn_start:])
    outcome = {"final_text": answer, "status": end.status, "termination_reason": end.reason,
               "policy_tokens": rt.ledger.policy_tokens(), "steps": main_steps(rt), "transcript": transcript}
    world, capture_error = _capture(rt, outcome)
    created_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    trajectory = trajectory_record(rt, end, lineage=lineage, answer=answer,
                                   world_bytes=None if world is None else int(world.get("bytes", 0)),
                                   created_at=created_at)
    return TurnResult(
        answer=answer, status=end.status, termination_reason=end.reason, world=world,
        trajectory=trajectory, params_read=trajectory["params_read"], policy_tokens=rt.ledger.policy_tokens(),
        steps=main_steps(rt), transcript=transcript,
        error=f"{end.reason}: {end.message}" if end.status == "failed" else "",
        usage=rt.ledger.billing_usage(), ledger=[r.to_json() for r in rt.ledger.records], events=rt.events,
        record_error=capture_error, pending=rt.pending,
    )


def _capture(rt: TurnRuntime, outcome: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The turn's world, or ``None`` and why not: a capture failure never fails a finished turn.

    A refused world (``WorldError``, e.g. a credential in a tool result) emits ``world.refused``;
    any other exception (a bug, or text that cannot be encoded) emits ``world.capture_error``. Both
    events carry the exception class name only; the reason returned is safe to show
    (``docs/operations/failure-recovery.md``, *Capture errors*).
    """
    if rt.capture is None:
        return None, ""
    try:
        return rt.capture.finish(outcome), ""
    except Exception as exc:
        refused = isinstance(exc, WorldError)
        rt.emit("world.refused" if refused else "world.capture_error", error=type(exc).__name__)
        what = "world refused" if refused else "world not captured"
        return None, f"{what}: {safe_reason(exc, 200)}"


def run_turn(
    plan: TurnPlan,
    harness: Harness | None,
    client: ModelClient,
    *,
    record_world: bool = True,
    seed: int | None = None,
    cancelled: Callable[[], bool] | None = None,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    lineage: str | None = None,
    on_event: EventSink | None = None,
) -> TurnResult:
    """Run one turn of K0 with ``harness`` (None → H0) and the policy ``client``.

    Args:
        plan: the host's turn plan; ``plan.credentials`` is never captured.
        harness: the turn's harness, frozen for the turn (docs/architecture.md invariant 1); None → H0.
        client: the policy model client (the host builds it with the plan's credentials).
        record_world: capture a world (docs/formats.md §4.1); hosts pass ``settings.record_world``, and False
            when the provider runs its own tool loop.
        seed: the request ``seed`` field (None on live turns; the trial index in replays).
        cancelled: checked before every model call (and between streamed chunks); True → status
            ``cancelled`` (replays, and a host that stopped a streamed turn).
        retry: model retries on transient errors (default 3 retries, 1 s / 2 s / 4 s).
        sleep: the backoff sleep (tests inject a no-op).
        lineage: trajectory lineage ``fixed | agent | h0`` (default: ``h0`` when ``harness`` is None,
            else ``agent``).
        on_event: the host's event callback; with it the main calls stream and text, tool calls
            and tool results reach the host as they happen (:mod:`rsi_common.kernel.events`). The
            world, trajectory and answer are the same as without it.

    Returns:
        The :class:`TurnResult` (answer, status, world dict or None, trajectory, params read, c(τ) …).

    Raises:
        InvalidInput: a host kwarg has the wrong type.
        ManifestError: the harness cannot be instantiated.
    """
    used = harness if harness is not None else h0()
    rt, hooks, runner = _prepare(plan, used, client, record_world=record_world, seed=seed,
                                 retry=retry or RetryPolicy(), sleep=sleep, cancelled=cancelled,
                                 on_event=on_event)
    end = run_loop(rt, hooks, runner)
    return _finish(rt, hooks, end, lineage or ("h0" if harness is None else "agent"))
