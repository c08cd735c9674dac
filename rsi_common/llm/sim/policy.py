"""The sim model answering a turn (docs/formats.md#sim-3-the-policy), role ``policy``.

0. Under a goal note (``Goal: …``), the goal rules of :mod:`rsi_common.llm.sim.goals` answer first.

1. Tools are offered and the input names one (case-insensitive, as a whole word — ``use <name>``
   included) that was not called in this turn → the reply is one ``tool_use`` block for the
   first such tool in order of first mention. Its arguments are the input's ``key=value`` pairs
   (``"quoted"`` values may contain spaces) whose key is a property of the tool's
   ``input_schema`` (every pair when the schema lists no properties); a value becomes an int,
   float or bool when the property's schema type says so, else a string. The block id is
   ``toolu_sim_<hex>``, derived from the messages and the tool name (not from the seed).
2. Otherwise the answer (:mod:`rsi_common.llm.sim.traits`): facts from ``key: value`` lines of
   this turn's non-error tool results, else from the input; active traits (triggers in the system
   prompt, the turn context or the input) each dropped with probability ``noise``.
3. With an output schema the reply is the facts as one JSON object ``{key: value}`` (values as in
   the tool results or the input, units kept; a later duplicate key wins), traits not applied.

Before rule 1, the runtime behaviours (delegation, messages, refine;
:mod:`rsi_common.llm.sim.runtime_acts`) when their tools are offered.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from rsi_common.llm.base import canonical_json
from rsi_common.llm.sim.core import SimCall, Turn, find_turn, result_text, text_reply
from rsi_common.llm.sim.goals import goal_reply
from rsi_common.llm.sim.runtime_acts import runtime_act
from rsi_common.llm.sim.traits import (
    Answer,
    apply_traits,
    facts_from_input,
    facts_from_text,
    render,
    traits_in,
    unit_hints,
)

__all__ = ["active_traits", "named_tools", "parse_kv_args", "policy"]

_KV = re.compile(r"""(?<![\w.\-])([A-Za-z_][\w.\-]*)=("([^"]*)"|'([^']*)'|([^\s,;]+))""")


def policy(call: SimCall) -> list[dict[str, Any]]:
    """Answer one policy call (module docstring)."""
    request = call.request
    turn = find_turn(request.messages)
    under_goal = goal_reply(request, turn)
    if under_goal is not None:
        return under_goal
    if request.tools:
        called = {str(u.get("name", "")).lower() for u in turn.tool_uses}
        acted = runtime_act(request.messages, request.tools, turn)  # delegation, messages, refine
        if acted is not None:
            return acted
        for tool in named_tools(turn.input, request.tools):
            if str(tool["name"]).lower() not in called:
                return [_tool_use(request.messages, tool, turn.input)]
    facts = [f for r in turn.results for f in facts_from_text(result_text(r))] or facts_from_input(turn.input)
    if request.output_schema is not None:
        return text_reply(json.dumps(dict(facts), ensure_ascii=False))
    traits = [t for t in active_traits(request.system, turn) if call.draw(f"noise:{t}") >= call.config.noise]
    used: list[str] = []
    for u in turn.tool_uses:
        if u.get("name") and u["name"] not in used:
            used.append(str(u["name"]))
    hints = unit_hints("\n".join(result_text(r) for r in turn.results))
    answer = apply_traits(Answer(facts=facts, tools_used=used, hints=hints), traits)
    return text_reply(render(answer))


def active_traits(system: str, turn: Turn) -> list[str]:
    """Traits whose triggers occur in the system prompt, the turn context or the input."""
    return traits_in("\n".join((system, turn.context, turn.input)), request=turn.input)


def named_tools(text: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The offered tools that ``text`` names as whole words, in order of first mention."""
    hits: list[tuple[int, int, dict[str, Any]]] = []
    for i, tool in enumerate(tools):
        name = str(tool.get("name", ""))
        if not name:
            continue
        m = re.search(r"(?<![\w\-])" + re.escape(name) + r"(?![\w\-])", text, re.IGNORECASE)
        if m is not None:
            hits.append((m.start(), i, tool))
    return [tool for _, _, tool in sorted(hits, key=lambda h: (h[0], h[1]))]


def parse_kv_args(text: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """``key=value`` pairs of ``text`` typed by ``schema`` (module docstring, step 1)."""
    props = (schema or {}).get("properties") or {}
    out: dict[str, Any] = {}
    for m in _KV.finditer(text):
        key = m.group(1)
        if props and key not in props:
            continue
        if m.group(3) is not None or m.group(4) is not None:
            raw = m.group(3) if m.group(3) is not None else m.group(4)
        else:
            raw = m.group(5).rstrip(".!?)")
        kind = (props.get(key) or {}).get("type") if isinstance(props.get(key), dict) else None
        out[key] = _typed(raw, kind)
    return out


def _typed(raw: str, kind: Any) -> Any:
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw)
    except ValueError:
        return raw
    if kind == "boolean" and raw.lower() in ("true", "false", "yes", "no", "1", "0"):
        return raw.lower() in ("true", "yes", "1")
    return raw


def _tool_use(messages: list[dict[str, Any]], tool: dict[str, Any], text: str) -> dict[str, Any]:
    digest = hashlib.sha256(canonical_json([messages, tool["name"]]).encode("utf-8")).hexdigest()
    return {
        "type": "tool_use",
        "id": "toolu_sim_" + digest[:20],
        "name": tool["name"],
        "input": parse_kv_args(text, tool.get("input_schema")),
    }
