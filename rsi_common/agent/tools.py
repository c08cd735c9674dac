"""Tools from typed Python functions (docs/host/agent.md#tools).

:func:`tool_def` turns a function into a kernel :class:`~rsi_common.kernel.ToolDef`:

* **name**: the function's name (or ``name=``); **description**: the docstring's text before its
  ``Args:`` section (or ``description=``);
* **input schema**: JSON schema of the parameters, built by pydantic from the annotations (any
  type pydantic validates: ``str``, ``int``, ``float``, ``bool``, ``list[...]``, ``dict[str, ...]``,
  ``Literal[...]``, ``X | None``, enums, pydantic models); a parameter with a default is optional;
  each parameter's description comes from the docstring's ``Args:`` entry (Google style). A
  parameter without an annotation, ``*args`` or ``**kwargs`` is refused when the tool is made.
* **arguments are validated** before the function runs: arguments that do not fit the schema give
  the model an error result naming each bad field (``invalid arguments: count: Input should be a
  valid integer``), never a crash and never the value it sent. An exception raised by the function
  is an error result too (the kernel's rule).
* **results**: a ``str`` is sent as is, a :class:`~rsi_common.kernel.ToolResult` or a list of content
  blocks as given, anything else as JSON (``default=str``). An ``async def`` tool is awaited on a
  private event loop in the thread that runs the tool.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Callable
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from rsi_common.errors import InvalidInput
from rsi_common.kernel import ToolDef, ToolOutput, ToolResult

__all__ = ["MAX_TOOL_NAME_CHARS", "docstring_parts", "tool_def"]

MAX_TOOL_NAME_CHARS = 64
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ARG = re.compile(r"^\s*\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def docstring_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: description})`` of a Google-style docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section = ""
    current = ""
    for line in lines:
        head = _SECTION.match(line)
        if head:
            section, current = head.group(1), ""
            continue
        if not section:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            entry = _ARG.match(line)
            if entry and (not line.startswith(" " * 8) or not current):
                current = entry.group(1)
                args[current] = entry.group(2).strip()
            elif current and line.strip():
                args[current] = (args[current] + " " + line.strip()).strip()
    return "\n".join(summary).strip(), args


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _arguments_model(fn: Callable[..., Any], name: str, arg_docs: dict[str, str]) -> type[BaseModel]:
    signature = inspect.signature(fn)
    try:
        hints = get_type_hints(fn)
    except Exception as exc:  # an annotation that does not resolve
        raise InvalidInput(f"tool {name}: its annotations do not resolve ({type(exc).__name__})") from None
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise InvalidInput(f"tool {name}: parameter {param.name}: *args and **kwargs cannot be described")
        if param.name not in hints:
            raise InvalidInput(f"tool {name}: parameter {param.name} needs a type annotation")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints[param.name], Field(default, description=arg_docs.get(param.name)))
    config = ConfigDict(extra="forbid")
    return create_model(f"{name}_arguments", __config__=config, **fields)


def _bad_arguments(exc: ValidationError) -> ToolResult:
    problems = []
    for err in exc.errors()[:10]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        problems.append(f"{where}: {err.get('msg', 'invalid')}")
    return ToolResult("invalid arguments: " + "; ".join(problems), is_error=True)


def _output(value: Any) -> ToolOutput:
    if isinstance(value, str | ToolResult):
        return value
    if isinstance(value, list) and all(isinstance(b, dict) and "type" in b for b in value):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def tool_def(fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
             read_only: bool = False) -> ToolDef:
    """The kernel tool of ``fn`` (module docstring).

    Args:
        fn: a function whose parameters are all annotated.
        name: the tool's name (default: the function's name).
        description: shown to the model (default: the docstring's summary).
        read_only: the tool has no side effects (may run in parallel).

    Raises:
        InvalidInput: a name outside ``[A-Za-z_][A-Za-z0-9_-]{0,63}``, or a parameter that cannot be
            described (no annotation, ``*args``, ``**kwargs``, an annotation that does not resolve).
    """
    if not callable(fn):
        raise InvalidInput(f"a tool must be a function, got {type(fn).__name__}")
    tool_name = name or getattr(fn, "__name__", "")
    if not isinstance(tool_name, str) or not _NAME.fullmatch(tool_name):
        raise InvalidInput("tool name: use 1-64 letters, digits, _ and -, starting with a letter or _")
    summary, arg_docs = docstring_parts(inspect.getdoc(fn))
    model = _arguments_model(fn, tool_name, arg_docs)
    schema = _strip_titles(model.model_json_schema())
    schema.pop("additionalProperties", None)
    is_async = inspect.iscoroutinefunction(fn)

    def execute(arguments: dict[str, Any]) -> ToolOutput:
        try:
            parsed = model.model_validate(arguments)
        except ValidationError as exc:
            return _bad_arguments(exc)
        kwargs = {key: getattr(parsed, key) for key in type(parsed).model_fields}
        value = asyncio.run(fn(**kwargs)) if is_async else fn(**kwargs)
        return _output(value)

    return ToolDef(name=tool_name, description=description if description is not None else summary,
                   input_schema=schema, read_only=read_only, executor=execute)
