"""Model factory of the benchmarks (``RSI_MODEL_FACTORY=rsi_worker.bench.models:bench_models``).

The default models (sim or real, from settings), except for agents whose model is
:data:`HOPELESS_MODEL`: there, variant B's proposer always writes a harness the policy model cannot
work with — its system prompt carries :data:`MARKER`, and a policy call under such a prompt answers
"I cannot help with that." after the usual sim latency. Every judge then fails B's replays, so B is
a hopeless candidate that the exact-bound early stop (docs/algorithm/formulas.md §2.10) can cancel. Variant A
and every
other role behave as usual. Keying on the agent's model (recorded in its worlds) lets one worker
pool serve ordinary and hopeless agents side by side.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rsi_common.config import Settings
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse, Usage
from rsi_worker.consolidate import ModelFactory, default_models

__all__ = ["HOPELESS_MODEL", "MARKER", "bench_models"]

HOPELESS_MODEL = "sim-hopeless"
"""Agent model name that switches variant B to the hopeless proposal."""
MARKER = "HOPELESS"
"""Text of the hopeless harness's prompt block that the policy refuses to work with."""
REFUSAL = "I cannot help with that."

_VARIANT = re.compile(r"You draft variant ([A-H]) ")
_HOPELESS_ACTIONS: tuple[dict[str, Any], ...] = (
    {"action": "edit_file", "path": "manifest.json", "old": '"extra_blocks": []',
     "new": f'"extra_blocks": ["Answer in the {MARKER} style."]'},
    {"action": "done", "summary": "a style instruction",
     "edits": [{"id": "E1", "component": "prompt", "hypothesis": "a style instruction",
                "targets_mode": "missing-table", "predicted_affected": [],
                "retroactive_check": "corrective: fixes the failing worlds"}]},
)


def _text_reply(text: str, usage: Usage | None = None) -> ModelResponse:
    return ModelResponse(
        content=[{"type": "text", "text": text}],
        usage=usage or Usage(input_tokens=10, output_tokens=max(1, len(text) // 4)),
        stop_reason="end_turn",
        model=HOPELESS_MODEL,
    )


class RefusingPolicy:
    """The policy model, except that a system prompt holding :data:`MARKER` gets :data:`REFUSAL`.

    The refusal still goes through the wrapped client (its latency and token count apply); only
    its content is replaced.
    """

    def __init__(self, inner: ModelClient) -> None:
        self.inner = inner
        self.provider, self.model = inner.provider, inner.model

    def complete(self, request: ModelRequest) -> ModelResponse:
        response = self.inner.complete(request)
        if MARKER in request.system:
            return _text_reply(REFUSAL, response.usage)
        return response


class HopelessProposer:
    """Variant B plays :data:`_HOPELESS_ACTIONS` (one per reply, after ``latency_ms``); other
    variants go to the wrapped proposer."""

    def __init__(self, inner: ModelClient, latency_ms: float,
                 actions: Sequence[Mapping[str, Any]] = _HOPELESS_ACTIONS) -> None:
        self.inner, self.latency_ms, self.actions = inner, latency_ms, list(actions)
        self.provider, self.model = inner.provider, inner.model

    def complete(self, request: ModelRequest) -> ModelResponse:
        first = request.messages[0]["content"] if request.messages else ""
        text = first if isinstance(first, str) else json.dumps(first)
        found = _VARIANT.search(text)
        if found is None or found.group(1) != "B":
            return self.inner.complete(request)
        if self.latency_ms > 0:
            time.sleep(self.latency_ms / 1000.0)
        n = sum(1 for m in request.messages if m.get("role") == "assistant")
        return _text_reply(json.dumps(self.actions[min(n, len(self.actions) - 1)]))


def bench_models(settings: Settings) -> ModelFactory:
    """The default models; agents of model :data:`HOPELESS_MODEL` get a hopeless variant B."""
    base = default_models(settings)

    def build(provider: str, model: str, role: str) -> ModelClient:
        client = base(provider, model, role)
        if model != HOPELESS_MODEL:
            return client
        if role == "policy":
            return RefusingPolicy(client)
        if role == "proposer":
            return HopelessProposer(client, settings.sim.latency_ms)
        return client

    return build
