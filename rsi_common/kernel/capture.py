"""World capture during a live turn (docs/formats.md §4.1).

What is captured: the host's plan (system parts, schema, notes, resolved window/compaction/
max_tokens, the ``SAFE_KWARGS`` present), the earlier conversation and metadata, the input, the
first-iteration memory retrieval, the tool definitions at turn start (without contributed tools),
every tool call with the result the model saw (appended after each batch, matched by
``tool_use_id``) and the outcome. Never captured: credentials, clients, headers, the harness-built
system prompt, the exposed tool list, compaction output. ``finish`` hands the record to
:func:`rsi_common.world.finalize_world` (clipping, images, credential scrub, size limit, the input
boundary: a lone surrogate or U+0000 in content becomes U+FFFD and is listed in ``defects``).

Every value is depth-checked (docs/security/input-boundary.md) before it is copied; a value nested
too deep never raises during the turn: the capture keeps the first error and ``finish`` raises it
(a :class:`~rsi_common.errors.WorldError`), so the turn stands and only its world is refused.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rsi_common.boundary import Defect, check_depth
from rsi_common.errors import InputLimitError, WorldError, WorldLimitError
from rsi_common.kernel.tool_registry import ToolRegistry
from rsi_common.kernel.types import ModelConfig, TurnPlan
from rsi_common.world import SAFE_KWARGS, WORLD_SCHEMA, finalize_world

if TYPE_CHECKING:
    from rsi_common.kernel.runner import ExecutedCall

__all__ = ["WorldCapture", "tool_defs_record"]


def _json_safe(x: Any, path: str) -> Any:
    """A deep copy that survives a JSON round trip (non-JSON values become ``str``), after the depth check.

    Raises:
        WorldLimitError: nested deeper than the input boundary allows.
    """
    check_depth(x, path, error=WorldLimitError)
    return json.loads(json.dumps(x, ensure_ascii=False, default=str))


def tool_defs_record(registry: ToolRegistry) -> list[dict[str, Any]]:
    """``tools.defs`` entries for every non-contributed, serializable tool, in registry order."""
    contributed = set(registry.contributed())
    out: list[dict[str, Any]] = []
    for tool in registry:
        if not tool.name or tool.name in contributed:
            continue
        try:
            check_depth(tool.input_schema, "input_schema")
            schema = json.loads(json.dumps(dict(tool.input_schema), ensure_ascii=False))
        except (TypeError, ValueError, InputLimitError):
            continue
        out.append({
            "name": tool.name,
            "description": str(tool.description),
            "input_schema": schema,
            "core": bool(tool.core),
            "activated": bool(tool.activated) or (not tool.core and registry.is_activated(tool.name)),
            "guide": bool(tool.guide),
            "live": bool(tool.live),
            "family": tool.family,
            "read_only": bool(tool.read_only),
        })
    return out


class WorldCapture:
    """Collects one world record while a live turn runs."""

    def __init__(self, plan: TurnPlan, config: ModelConfig, *, harness_version: str, provider: str,
                 model: str, registry: ToolRegistry) -> None:
        self.error: WorldError | None = None
        """The first capture error; ``finish`` raises it."""
        self._call_index: dict[str, int] = {}
        self.defects: list[Defect] = []
        """Repairs made before capture (the tool runner's), merged into the world's ``defects``."""
        try:
            self.data = self._start(plan, config, harness_version=harness_version, provider=provider,
                                    model=model, registry=registry)
        except WorldError as exc:
            self.error = exc
            self.data = {"memory": {"chunks": None}, "tools": {"calls": []}}

    @staticmethod
    def _start(plan: TurnPlan, config: ModelConfig, *, harness_version: str, provider: str, model: str,
               registry: ToolRegistry) -> dict[str, Any]:
        clock = float(plan.clock)
        metadata = {str(k): v for k, v in plan.metadata.items() if not str(k).startswith("_")}
        return {
            "schema": WORLD_SCHEMA,
            "replayable": True,
            "truncated": False,
            "images_dropped": False,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock)),
            "clock": clock,
            "agent_id": plan.agent_id,
            "io_id": plan.io_id,
            "interaction_id": plan.interaction_id,
            "harness_version": harness_version,
            "provider": provider,
            "model": model,
            "plan": {
                "name": plan.name,
                "system_parts": [[str(p[0]), str(p[1])] for p in plan.system_parts if len(p) == 2],
                "output_schema": _json_safe(config.output_schema, "plan.output_schema"),
                "context_window_budget": config.context_window_budget,
                "enable_compaction": config.enable_compaction,
                "max_tokens": config.max_tokens,
                "turn_notes": [str(n) for n in plan.turn_notes],
                "kwargs": _json_safe({k: plan.kwargs[k] for k in SAFE_KWARGS if k in plan.kwargs},
                                     "plan.kwargs"),
            },
            "state": {
                "session_id": plan.session_id,
                "messages": _json_safe(list(plan.messages), "state.messages"),
                "metadata": _json_safe(metadata, "state.metadata"),
            },
            "input": _json_safe(plan.input, "input"),
            "memory": {"present": plan.memory is not None, "chunks": None},
            "tools": {"defs": tool_defs_record(registry), "contributed": registry.contributed(), "calls": []},
        }

    def memory_retrieved(self, chunks: list[dict[str, Any]]) -> None:
        """Record the first-iteration retrieval result (later retrievals are ignored)."""
        if self.error is None and self.data["memory"]["chunks"] is None:
            try:
                self.data["memory"]["chunks"] = _json_safe(chunks, "memory.chunks")
            except WorldError as exc:
                self.error = exc

    def tool_batch(self, executed: Sequence[ExecutedCall]) -> None:
        """Append one batch of calls; a repeated ``tool_use_id`` replaces its earlier entry."""
        calls: list[dict[str, Any]] = self.data["tools"]["calls"]
        for call in executed:
            if self.error is not None:
                return
            path = f"tools.calls[{len(calls)}]"
            try:
                check_depth(call.input, f"{path}.input", depth=5, error=WorldLimitError)
                check_depth(call.content, f"{path}.content", depth=5, error=WorldLimitError)
                rec = _json_safe(call.record(), path)
            except WorldError as exc:
                self.error = exc
                return
            if call.repaired:  # the runner replaced bad characters before the model saw them
                self.defects.append({"path": f"{path}.content", "defect": "lone_surrogate"})
            idx = self._call_index.get(call.tool_use_id) if call.tool_use_id else None
            if idx is None:
                self._call_index[call.tool_use_id] = len(calls)
                calls.append(rec)
            else:
                calls[idx] = rec

    def finish(self, outcome: dict[str, Any]) -> dict[str, Any]:
        """The finalized world (``finalize_world``).

        Raises:
            WorldError: the world is refused: the first capture error, a credential
                (``CredentialError``) or the input boundary (``WorldLimitError``).
        """
        if self.error is not None:
            raise self.error
        data = dict(self.data)
        if self.defects:
            data["defects"] = list(self.defects)
        check_depth(outcome, "outcome", depth=2, error=WorldLimitError)
        data["outcome"] = _json_safe(copy.deepcopy(outcome), "outcome")
        return finalize_world(data)
