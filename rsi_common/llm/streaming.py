"""Streamed model calls: the chunks a streaming client yields, and one way to stream any client.

A client that can stream has a ``stream(request)`` method (:class:`StreamingClient`) yielding
:class:`TextChunk`, :class:`ThinkingChunk` and :class:`ToolCallChunk` objects as the provider sends
them, and exactly one :class:`ResponseChunk` last. The final response is the same
:class:`~rsi_common.llm.base.ModelResponse` that ``complete(request)`` returns for the same reply
(each client maps the assembled stream through the same ``from_wire`` as its plain call), so a
streamed turn records the same world as a turn run without streaming (docs/host/agent.md#streaming).

Usage is read from the final response only, so it is counted once however many chunks carried it.
Errors are the ones ``complete`` raises (:class:`~rsi_common.errors.ModelTransientError` for a
429/5xx before or during the stream and for a dropped connection; no retry inside ``stream``: the
kernel retries its calls). A consumer that stops iterating closes the generator, which closes the
HTTP response.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rsi_common.llm.base import ModelClient, ModelRequest, ModelResponse

__all__ = [
    "ModelChunk",
    "ResponseChunk",
    "StreamingClient",
    "TextChunk",
    "ThinkingChunk",
    "ToolCallAssembler",
    "ToolCallChunk",
    "can_stream",
    "stream_call",
]


@dataclass(frozen=True)
class TextChunk:
    """A piece of the answer's text, in arrival order."""

    text: str


@dataclass(frozen=True)
class ThinkingChunk:
    """A piece of the model's visible reasoning (providers that stream it)."""

    text: str


@dataclass(frozen=True)
class ToolCallChunk:
    """A piece of a tool call: ``index`` names the call within the response; the first piece of a
    call carries its ``id`` and ``name``, later pieces only more ``arguments`` (partial JSON text)."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True)
class ResponseChunk:
    """The last chunk: the whole response, assembled (usage counted once, here)."""

    response: ModelResponse


ModelChunk = TextChunk | ThinkingChunk | ToolCallChunk | ResponseChunk
"""What a streaming client yields."""


@runtime_checkable
class StreamingClient(ModelClient, Protocol):
    """A :class:`~rsi_common.llm.base.ModelClient` that can also stream (module docstring)."""

    def stream(self, request: ModelRequest) -> Iterator[ModelChunk]:
        """Yield the reply's chunks as they arrive, then one :class:`ResponseChunk`."""
        ...


def can_stream(client: ModelClient) -> bool:
    """Whether ``client`` has a ``stream`` method."""
    return callable(getattr(client, "stream", None))


def stream_call(client: ModelClient, request: ModelRequest) -> Generator[ModelChunk, None, None]:
    """Stream ``request`` on ``client``; a client that cannot stream answers with ``complete`` and
    its text comes as one chunk (tool calls as one chunk each), then the response."""
    if can_stream(client):
        yield from client.stream(request)  # type: ignore[attr-defined]
        return
    response = client.complete(request)
    yield from chunks_of(response)
    yield ResponseChunk(response)


def chunks_of(response: ModelResponse) -> Iterator[ModelChunk]:
    """The content chunks of a whole response, one per block (no :class:`ResponseChunk`)."""
    index = 0
    for block in response.content:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            yield TextChunk(str(block["text"]))
        elif kind == "thinking" and block.get("thinking"):
            yield ThinkingChunk(str(block["thinking"]))
        elif kind == "tool_use":
            yield ToolCallChunk(index, str(block.get("id", "")), str(block.get("name", "")),
                                json.dumps(block.get("input") or {}, ensure_ascii=False))
            index += 1


@dataclass
class ToolCallAssembler:
    """Joins :class:`ToolCallChunk` pieces into whole calls, by ``index`` (arrival order kept)."""

    calls: dict[int, dict[str, Any]] = field(default_factory=dict)

    def add(self, chunk: ToolCallChunk) -> None:
        """Merge one piece: ``id`` / ``name`` when given, ``arguments`` appended."""
        call = self.calls.setdefault(chunk.index, {"id": "", "name": "", "arguments": ""})
        if chunk.id:
            call["id"] = chunk.id
        if chunk.name and not call["name"]:
            call["name"] = chunk.name
        call["arguments"] += chunk.arguments

    def done(self) -> list[dict[str, Any]]:
        """The calls ``{id, name, arguments}`` in index order (``arguments``: the joined JSON text)."""
        return [self.calls[i] for i in sorted(self.calls)]
