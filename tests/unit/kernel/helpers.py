"""Shared builders for kernel and replay tests (no fixtures: plain functions)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from rsi_common.config import SimConfig
from rsi_common.harness import Harness, build_harness, h0
from rsi_common.kernel import RetryPolicy, ToolDef, TurnPlan, TurnResult, run_turn
from rsi_common.kernel.testing import RecordingClient
from rsi_common.llm import ModelClient
from rsi_common.llm.sim import SimClient

NO_RETRY = RetryPolicy(backoff_s=0.0)
CLOCK = 1_700_000_000.0  # 2023-11-14 22:13 UTC
SECRET = "sk-" + "ant-api03-" + "Q7" * 24


def no_sleep(_s: float) -> None:
    """A backoff sleep that returns at once."""


def sim() -> SimClient:
    """A fresh sim policy client (no latency, no noise)."""
    return SimClient("sim-1", SimConfig())


def sales_tools(log: list[tuple[str, dict[str, Any]]] | None = None) -> list[ToolDef]:
    """Two host tools with key: value results; calls are appended to ``log``."""

    def sales(inp: dict[str, Any]) -> str:
        if log is not None:
            log.append(("get_sales", inp))
        return f"region: {inp.get('region')}\nrevenue: 12 EUR"

    def weather(inp: dict[str, Any]) -> str:
        if log is not None:
            log.append(("get_weather", inp))
        return f"city: {inp.get('city')}\ntemp: 21 C"

    schema = {"type": "object", "properties": {"region": {"type": "string"}}}
    return [
        ToolDef("get_sales", "Sales figures by region.", schema, executor=sales),
        ToolDef(
            "get_weather",
            "Weather by city.",
            {"type": "object", "properties": {"city": {"type": "string"}}},
            executor=weather,
        ),
    ]


SKILL_TEXT = (
    "---\nname: cite-sources\ndescription: Show the query behind every number.\n---\n"
    "When you report a number from a tool, name the tool call that produced it.\n"
)
"""The skill file of the docs/check-vectors.md §9.11 harness vector."""
SKILL_COMPONENT = {
    "id": "skills.library",
    "kind": "skill",
    "impl": "rsi_common.kernel.components.skills:SkillLibraryComponent",
    "files": ["skills/cite-sources/SKILL.md"],
}

TWO_TOOL_INPUT = "Use get_sales region=EU and get_weather city=Paris, then summarise."


def make_plan(input: Any = TWO_TOOL_INPUT, **kw: Any) -> TurnPlan:
    """A plan with the sales tools, one system part and a credential."""
    defaults: dict[str, Any] = {
        "agent_id": "agent-1",
        "io_id": "io-1",
        "interaction_id": "conv-1",
        "session_id": "s-1",
        "provider": "sim",
        "model": "sim-1",
        "credentials": {"api_key": SECRET},
        "name": "helper",
        "system_parts": [("identity", "You are a helpful analyst.")],
        "tools": sales_tools(),
        "clock": CLOCK,
    }
    defaults.update(kw)
    return TurnPlan(input=input, **defaults)


def live(
    plan: TurnPlan, harness: Harness | None = None, client: ModelClient | None = None, **kw: Any
) -> tuple[TurnResult, RecordingClient]:
    """Run a live turn with a recording wrapper around ``client`` (default: the sim)."""
    rec = RecordingClient(client if client is not None else sim())
    result = run_turn(plan, harness, rec, retry=NO_RETRY, sleep=no_sleep, **kw)
    return result, rec


def harness_with(
    edits: dict[str, Any],
    files: dict[str, str] | None = None,
    extra_components: Sequence[dict[str, Any]] = (),
    locked: Sequence[str] | None = None,
) -> Harness:
    """H0 with params set (``{address: value}``), extra components and files."""
    manifest = h0().manifest.to_json()
    if locked is not None:
        manifest["locked"] = list(locked)
    manifest["components"].extend(extra_components)
    for addr, value in edits.items():
        comp_id, _, key = addr.partition(".params.")
        for comp in manifest["components"]:
            if comp["id"] == comp_id:
                node = comp.setdefault("params", {})
                parts = key.split(".")
                for part in parts[:-1]:
                    node = node.setdefault(part, {})
                node[parts[-1]] = value
    return build_harness(manifest, files or {})


class Tripwire:
    """Executors that record every call and raise (a replay must never run a host tool).

    The runner turns the exception into an error result, so tests assert ``calls == []``.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []

    def executor(self, name: str) -> Callable[[dict[str, Any]], str]:
        def run(_inp: dict[str, Any]) -> str:
            self.calls.append(name)
            raise AssertionError(f"tool {name} was executed")

        return run


def dumps(x: Any) -> str:
    """JSON text of anything (for substring checks)."""
    return json.dumps(x, ensure_ascii=False, default=str)
