"""Tools from typed functions: the schema from the signature and docstring, validated arguments
(bad ones are an error result the model sees, never a crash)."""

from __future__ import annotations

import enum
from typing import Any, Literal

import pytest

from rsi_common.agent.tools import docstring_parts, tool_def
from rsi_common.errors import InvalidInput
from rsi_common.kernel import ToolResult, ToolRunner, build_registry


class Unit(enum.Enum):
    EUR = "EUR"
    USD = "USD"


def get_sales(region: str, year: int = 2024, unit: Unit = Unit.EUR, tags: list[str] | None = None,
              mode: Literal["sum", "avg"] = "sum") -> dict[str, Any]:
    """Sales figures of a region.

    Only closed quarters count.

    Args:
        region: The sales region, e.g. "north".
        year: The calendar year;
            earlier years are archived.
        unit: The currency.

    Returns:
        The figures.
    """
    return {"region": region, "year": year, "unit": unit.value, "tags": tags, "mode": mode}


def test_the_schema_comes_from_the_signature_and_the_docstring() -> None:
    tool = tool_def(get_sales)
    assert tool.name == "get_sales"
    assert tool.description == "Sales figures of a region.\n\nOnly closed quarters count."
    schema = dict(tool.input_schema)
    assert schema["type"] == "object" and schema["required"] == ["region"]
    props = schema["properties"]
    assert props["region"] == {"type": "string", "description": 'The sales region, e.g. "north".'}
    assert props["year"] == {"type": "integer", "default": 2024,
                             "description": "The calendar year; earlier years are archived."}
    assert props["mode"]["enum"] == ["sum", "avg"]
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert "title" not in props["region"] and "title" not in schema


def test_valid_arguments_are_converted_and_passed() -> None:
    out = tool_def(get_sales).executor({"region": "north", "unit": "USD", "tags": ["a"]})  # type: ignore[misc]
    assert out == '{"region": "north", "year": 2024, "unit": "USD", "tags": ["a"], "mode": "sum"}'


@pytest.mark.parametrize(("args", "message"), [
    ({}, "invalid arguments: region: Field required"),
    ({"region": "n", "year": "last"}, "invalid arguments: year: Input should be a valid integer"),
    ({"region": "n", "mode": "max"}, "invalid arguments: mode: Input should be 'sum' or 'avg'"),
    ({"region": "n", "secret": "sk-x"}, "invalid arguments: secret: Extra inputs are not permitted"),
    ({"region": ["n"], "year": 1.5}, "invalid arguments: region: Input should be a valid string; year:"),
])
def test_bad_arguments_are_an_error_result_naming_the_field(args: dict[str, Any], message: str) -> None:
    out = tool_def(get_sales).executor(args)  # type: ignore[misc]
    assert isinstance(out, ToolResult) and out.is_error
    assert isinstance(out.content, str) and out.content.startswith(message)
    assert "sk-x" not in out.content, "the value sent is never echoed"


def test_through_the_kernel_runner_bad_arguments_never_crash() -> None:
    def explode(city: str) -> str:
        """Always fails."""
        raise RuntimeError("boom")

    registry = build_registry([tool_def(get_sales), tool_def(explode)])
    runner = ToolRunner(registry)
    bad = runner.execute({"id": "1", "name": "get_sales", "input": {"year": "x"}}, {"get_sales"})
    assert bad.is_error and "region: Field required" in str(bad.content)
    failed = runner.execute({"id": "2", "name": "explode", "input": {"city": "Oslo"}}, {"explode"})
    assert failed.is_error and failed.content == "RuntimeError: boom"


def test_async_tools_names_and_descriptions() -> None:
    async def lookup(key: str) -> str:
        return key.upper()

    tool = tool_def(lookup, name="kv-get", description="Read a key.", read_only=True)
    assert (tool.name, tool.description, tool.read_only) == ("kv-get", "Read a key.", True)
    assert tool.executor({"key": "abc"}) == "ABC"  # type: ignore[misc]


def test_functions_that_cannot_be_described_are_refused() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    def star(*args: int) -> int:
        return 0

    with pytest.raises(InvalidInput, match="parameter x needs a type annotation"):
        tool_def(untyped)
    with pytest.raises(InvalidInput, match=r"\*args and \*\*kwargs"):
        tool_def(star)
    with pytest.raises(InvalidInput, match="tool name"):
        tool_def(get_sales, name="bad name!")


def test_docstring_parts_reads_google_style() -> None:
    doc = "Do it.\n\nArgs:\n    a (int): first.\n    b: second\n        continued.\n"
    summary, args = docstring_parts(doc)
    assert summary == "Do it." and args == {"a": "first.", "b": "second continued."}
