"""A scripted policy for the agent runtime's tests
(``RSI_MODEL_FACTORY=tests.support.runtime_policy:delegating``).

The lead (system text holds :data:`LEAD`) spawns one researcher per ``;``-separated topic of its
input, waits on all of them, then answers ``summary: <answers>``; a researcher (system text holds
:data:`RESEARCHER`) answers ``finding on <topic>``. A topic containing ``slow`` makes the researcher
push its process id to ``rsi:test:slow-started`` in Redis first; the first such call is then held
(a ``BLPOP`` nobody answers, at most :data:`HOLD_S`) until the kill -9 test kills its worker, and
every later call (the re-run) answers at once. (A fixed sleep made the re-run race the task's
soft time limit on a loaded machine.)
"""

from __future__ import annotations

import json
import os
from typing import Any

import redis

from rsi_common.config import Settings
from rsi_common.dispatch import redis_py_url
from rsi_common.kernel.testing import ScriptedModel
from rsi_common.llm import ModelRequest, ModelResponse, Usage
from rsi_worker.consolidate import ModelFactory, default_models

LEAD = "You are the lead. Delegate research."
RESEARCHER = "You are a researcher. Answer with one finding."
CATALOG = {"researcher": {"description": "finds one source", "tools": [], "max_iterations": 4,
                          "instructions": RESEARCHER}}
SLOW_KEY = "rsi:test:slow-started"
HOLD_KEY = "rsi:test:slow-hold"
"""Never pushed: the held call blocks on it."""
HOLD_S = 60
"""Longest hold of the first slow call, in seconds (the task's soft time limit ends it earlier)."""


def _text(text: str, usage: Usage) -> ModelResponse:
    return ModelResponse(content=[{"type": "text", "text": text}], usage=usage, stop_reason="end_turn",
                         model="sim-1")


def policy(request: ModelRequest, client: Any = None) -> ModelResponse:
    """One answer of the scripted lead or researcher (module docstring)."""
    usage = Usage(input_tokens=100, output_tokens=20)
    last = request.messages[-1]["content"]
    if RESEARCHER in request.system:
        topic = str(last).splitlines()[-1]
        if "slow" in topic and client is not None and client.rpush(SLOW_KEY, os.getpid()) == 1:
            client.blpop([HOLD_KEY], timeout=HOLD_S)  # held until the worker is killed
        return _text(f"finding on {topic}", usage)
    blocks = last if isinstance(last, list) else []
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        topics = [t.strip() for t in str(last).splitlines()[-1].split(";") if t.strip()]
        calls = [{"type": "tool_use", "id": f"s{i}", "name": "subagent_spawn",
                  "input": {"spec": "researcher", "input": t}} for i, t in enumerate(topics)]
        return ModelResponse(content=calls, usage=usage, stop_reason="tool_use", model="sim-1")
    if results[0]["tool_use_id"].startswith("s"):
        handles = [json.loads(r["content"])["handle"] for r in results]
        call = {"type": "tool_use", "id": "w1", "name": "subagent_wait", "input": {"handles": handles}}
        return ModelResponse(content=[call], usage=usage, stop_reason="tool_use", model="sim-1")
    answers = [x["answer"] or x["status"] for x in json.loads(results[0]["content"])["results"]]
    return _text("summary: " + "; ".join(answers), usage)


def delegating(settings: Settings) -> ModelFactory:
    """Workers' factory: the scripted policy for ``policy``, the defaults for every other role."""
    client = redis.Redis.from_url(redis_py_url(str(settings.redis_url))) if settings.redis_url else None
    base = default_models(settings)

    def build(provider: str, model: str, role: str) -> Any:
        if role == "policy":
            return ScriptedModel([lambda r: policy(r, client)], repeat_last=True, provider="sim",
                                 model="sim-1")
        return base(provider, model, role)

    return build
