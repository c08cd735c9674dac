"""``StandardContextComponent`` (kind ``context_mgmt``): retrieval, pruning, compaction, the guard.

docs/formats.md §5.6 *Context*. Decisions where the spec is silent:

* pruning and capacity compaction both require ``enable_compaction``; ``proactive_ratio`` and
  ``target_ratio`` are read when compaction is enabled and the window is > 0;
* capacity compaction runs at most once per turn (forced or proactive), and only when there are
  messages before this turn's input; the compact call's ``max_tokens`` is
  ``min(max_tokens, max(256, window·target_ratio − estimate of this turn's messages))``;
* ``retrieval_timeout_s`` is read when a memory component offers a retriever;
* the token estimate is ``ceil(len(canonical JSON of {system, messages, tools}) / 4)`` with the
  latest built system and tools (plus the turn context in the guard).
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, ClassVar, cast

from rsi_common.kernel.components.base import Component
from rsi_common.kernel.messages import canonical, response_text
from rsi_common.llm import COMPACTION_SYSTEM_PROMPT, ModelRequest

if TYPE_CHECKING:
    from rsi_common.kernel.components.protocols import MemoryHooks
    from rsi_common.kernel.runtime import TurnRuntime

__all__ = ["SUMMARY_PREFIX", "StandardContextComponent"]

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


def _retrieve_with_timeout(fn: Any, query: str, timeout_s: float) -> tuple[bool, Any]:
    """Run ``fn(query, timeout_s)`` in a daemon thread; ``(finished, result or exception)``."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(fn(query, timeout_s))
        except Exception as exc:  # reported as an event; the turn goes on without memory
            box.append(exc)

    th = threading.Thread(target=target, name="rsi-memory-retrieve", daemon=True)
    th.start()
    th.join(max(0.0, timeout_s))
    return (bool(box), box[0] if box else None)


class StandardContextComponent(Component):
    """First-iteration memory retrieval, cost pruning, capacity compaction and the budget guard."""

    KIND: ClassVar[str] = "context_mgmt"
    PARAMS: ClassVar[dict[str, tuple[Any, str]]] = {
        "prune_over_tokens": (30000, "prune old tool results when the estimate exceeds this (0 = off)"),
        "proactive_ratio": (0.8, "compact when the estimate exceeds window × this ratio"),
        "target_ratio": (0.7, "compaction target as a share of the window"),
        "retrieval_timeout_s": (10.0, "seconds to wait for memory retrieval on the first iteration"),
        "guard": (True, "refuse a call that cannot fit the context window"),
        "guard_min_headroom": (4096, "minimum free tokens the guard keeps for the reply"),
        "guard_extra": (2048, "tokens kept on top of max_tokens by the guard"),
    }

    # --- stage context ----------------------------------------------------------------------

    def before_call(self, rt: TurnRuntime) -> None:
        """Stage 1: (a) first-iteration retrieval, (b) cost prune, (c) capacity compaction."""
        if rt.iteration == 0:
            self._retrieve(rt)
        if not rt.config.enable_compaction:
            return
        self._prune(rt)
        window = rt.config.context_window_budget
        if window > 0:
            ratio = self.param_float("proactive_ratio")
            target = self.param_float("target_ratio")
            if rt.estimate_tokens() > window * ratio:
                self._compact(rt, target)

    def _retrieve(self, rt: TurnRuntime) -> None:
        retriever = None
        for comp in rt.components_of("memory"):
            retriever = cast("MemoryHooks", comp).retriever(rt)
            rt.fire(comp)
            if retriever is not None:
                break
        if retriever is None:
            return
        timeout_s = self.param_float("retrieval_timeout_s")
        query = rt.request_text()
        if rt.is_replay:
            finished, result = True, retriever(query, timeout_s)
        else:
            finished, result = _retrieve_with_timeout(retriever, query, timeout_s)
        if not finished:
            rt.emit("memory.timeout", timeout_s=timeout_s)
            return
        if isinstance(result, Exception):
            rt.emit("memory.error", error=type(result).__name__)
            return
        chunks = [dict(c) for c in (result or []) if isinstance(c, dict)]
        rt.memory_chunks = chunks
        rt.emit("memory.retrieved", chunks=len(chunks))
        if rt.capture is not None:
            rt.capture.memory_retrieved(chunks)

    def _prune(self, rt: TurnRuntime) -> None:
        kw = rt.kwarg("prune_over_tokens")
        prune_over = int(kw) if kw is not None else self.param_int("prune_over_tokens")
        if prune_over <= 0:
            return
        estimate_chars = rt.estimator.chars(rt.system, rt.messages, rt.request_tools)
        if -(-estimate_chars // 4) <= prune_over:
            return
        last_batch = max((i for i, m in enumerate(rt.messages) if _has_results(m)), default=-1)
        pruned = 0
        for i, msg in enumerate(rt.messages):
            if i == last_batch or -(-estimate_chars // 4) <= prune_over:
                continue
            if not _has_results(msg):
                continue
            new_msg, saved = _prune_message(msg)
            if saved:
                rt.messages[i] = new_msg
                estimate_chars -= saved
                pruned += 1
        if pruned:
            rt.emit("context.pruned", messages=pruned)

    def _compact(self, rt: TurnRuntime, target_ratio: float) -> bool:
        """Replace the messages before this turn's input by one summary message (once per turn)."""
        if rt.compacted or rt.turn_start == 0:
            return False
        rt.compacted = True
        earlier = rt.messages[: rt.turn_start]
        rest = rt.messages[rt.turn_start:]
        target = int(rt.config.context_window_budget * target_ratio)
        budget = target - rt.estimator.tokens(rt.system, rest, rt.request_tools)
        request = ModelRequest(
            model=rt.plan.model or str(getattr(rt.caller.client, "model", "")),
            system=COMPACTION_SYSTEM_PROMPT,
            messages=[{"role": "user", "content": "Conversation to summarise (JSON):\n"
                       + json.dumps(earlier, ensure_ascii=False, default=str)}],
            tools=[],
            max_tokens=min(rt.config.max_tokens, max(256, budget)),
            temperature=rt.config.temperature,
            seed=rt.seed,
        )
        response = rt.call_model(request, "compact")
        summary = response_text(response.content)
        rt.messages[: rt.turn_start] = [{"role": "user", "content": SUMMARY_PREFIX + summary}]
        rt.turn_start = 1
        rt.emit("context.compacted", replaced=len(earlier), estimate=rt.estimate_tokens())
        return True

    # --- stage guard ------------------------------------------------------------------------

    def ensure_fits(self, rt: TurnRuntime) -> bool:
        """Stage 4: True when the request fits (or the guard is off); compacts once when it does not."""
        if not rt.config.enable_compaction or not self.param_bool("guard"):
            return True
        window = rt.config.context_window_budget
        if window <= 0:
            return True
        min_headroom = self.param_int("guard_min_headroom")
        headroom = max(min_headroom, rt.config.max_tokens + self.param_int("guard_extra"))
        headroom = min(headroom, max(1024, window // 2))
        if rt.estimate_tokens(with_context=True) + headroom <= window:
            return True
        if self._compact(rt, self.param_float("target_ratio")):
            return rt.estimate_tokens(with_context=True) + headroom <= window
        return False


def _has_results(msg: dict[str, Any]) -> bool:
    content = msg.get("content")
    return msg.get("role") == "user" and isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def _prune_message(msg: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A copy of ``msg`` with every tool-result content replaced by the pruned marker; chars saved."""
    saved = 0
    blocks: list[Any] = []
    for b in msg.get("content") or []:
        if isinstance(b, dict) and b.get("type") == "tool_result":
            content = b.get("content")
            if isinstance(content, str) and content.startswith("[pruned: "):
                blocks.append(b)
                continue
            n = len(content) if isinstance(content, str) else len(canonical(content))
            marker = f"[pruned: {n} characters]"
            saved += len(canonical(content)) - len(canonical(marker))
            blocks.append({**b, "content": marker})
        else:
            blocks.append(b)
    if saved <= 0:
        return msg, 0
    return {**msg, "content": blocks}, saved
