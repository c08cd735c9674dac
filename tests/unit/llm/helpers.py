"""Helpers of the llm tests."""

from __future__ import annotations

from typing import Any

from rsi_common.llm import ModelRequest


def req(
    messages: list[dict[str, Any]] | str,
    *,
    system: str = "",
    tools: list[dict[str, Any]] | None = None,
    seed: int | None = None,
    output_schema: dict[str, Any] | None = None,
) -> ModelRequest:
    """A request; a string is one user message."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return ModelRequest(
        model="sim-1",
        system=system,
        messages=messages,
        tools=tools or [],
        seed=seed,
        output_schema=output_schema,
    )


def tool(name: str, **props: str) -> dict[str, Any]:
    """A tool definition whose properties have the given JSON-schema types."""
    return {
        "name": name,
        "description": f"the {name} tool",
        "input_schema": {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}},
    }
