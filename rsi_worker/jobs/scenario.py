"""A small shopping-assistant agent used by the demo, the tests and the load generator.

It gives the sim model (docs/formats.md) something realistic to do: a ``search`` tool whose recorded
results are ``key: value`` lines, turns that name the tool, and user follow-ups (corrections,
thanks, new topics) in the same conversation. Nothing here is a fake of the system under test:
turns run through the real kernel and are recorded through the real host API.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from rsi_common.harness import Harness
from rsi_common.kernel import ToolDef, TurnPlan, TurnResult, run_turn
from rsi_common.llm import ModelClient

__all__ = [
    "CATALOG",
    "CORRECTION",
    "SYSTEM_PARTS",
    "conversation_turn",
    "search_tool",
    "turn_plan",
]

SYSTEM_PARTS: tuple[tuple[str, str], ...] = (
    ("base", "You are a shopping assistant for a consumer electronics store."),
    ("policy", "Answer with the facts you found and recommend one option."),
)
"""The agent's own instructions (no sim trait trigger words: the harness has to learn them)."""

CORRECTION = "No, show it as a table and keep the recommendation to one line"
"""The demo's user correction (ISSUE: "No, show it as a table …")."""

CATALOG: dict[str, list[tuple[str, str]]] = {
    "laptops": [("Aero 14", "1299 EUR"), ("Zen 13", "999 EUR"), ("Volt 15", "1499 EUR")],
    "phones": [("Pixelo 9", "799 EUR"), ("Nova X", "649 EUR")],
    "headphones": [("Quiet One", "299 EUR"), ("Bass Pro", "199 EUR"), ("Air Lite", "99 EUR")],
    "monitors": [("View 27", "349 EUR"), ("Ultra 34", "599 EUR")],
    "tablets": [("Slate 11", "499 EUR"), ("Pad Mini", "399 EUR")],
    "cameras": [("Snap Z", "899 EUR"), ("Lens 5", "1199 EUR")],
}


def _search(args: Mapping[str, Any]) -> str:
    query = str(args.get("query") or args.get("q") or "").strip().lower()
    items = CATALOG.get(query) or CATALOG.get(query.rstrip("s") + "s") or []
    if not items:
        return f"no results for {query!r}"
    return "\n".join(f"{name}: {price}" for name, price in items)


def search_tool() -> ToolDef:
    """The store's catalogue search (read-only)."""
    return ToolDef(
        name="search",
        description="Search the store catalogue. Returns one 'name: price' line per product.",
        input_schema={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        read_only=True,
        executor=_search,
    )


def _io(agent_id: str, interaction_id: str, n: int) -> str:
    return "io_" + hashlib.sha256(f"{agent_id}/{interaction_id}/{n}".encode()).hexdigest()[:16]


def turn_plan(
    agent_id: str,
    interaction_id: str,
    n: int,
    text: str,
    history: Sequence[Mapping[str, Any]] = (),
    *,
    provider: str = "sim",
    model: str = "sim-1",
    clock: float | None = None,
) -> TurnPlan:
    """The plan of turn ``n`` of a conversation (io ids are deterministic)."""
    kw: dict[str, Any] = {} if clock is None else {"clock": clock}
    return TurnPlan(
        input=text,
        agent_id=agent_id,
        io_id=_io(agent_id, interaction_id, n),
        interaction_id=interaction_id,
        session_id=interaction_id,
        provider=provider,
        model=model,
        name="shop-assistant",
        system_parts=SYSTEM_PARTS,
        messages=list(history),
        tools=(search_tool(),),
        **kw,
    )


def conversation_turn(
    client: ModelClient,
    harness: Harness | None,
    agent_id: str,
    interaction_id: str,
    n: int,
    text: str,
    history: Sequence[Mapping[str, Any]] = (),
    **kw: Any,
) -> TurnResult:
    """Run one live turn through the kernel (the caller records it)."""
    return run_turn(turn_plan(agent_id, interaction_id, n, text, history, **kw), harness, client)


def next_history(history: Sequence[Mapping[str, Any]], text: str, answer: str) -> list[dict[str, Any]]:
    """The conversation after a turn: previous messages, the request and the answer."""
    return [*map(dict, history), {"role": "user", "content": text}, {"role": "assistant", "content": answer}]
