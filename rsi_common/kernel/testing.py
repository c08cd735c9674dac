"""Test helpers shipped with the kernel (like a stub broker): a scripted and a recording client.

``ScriptedModel`` answers each request with the next prepared :class:`ModelResponse` (or the
result of a callable, or raises a prepared exception) and records every request, so whole turns
and replays run offline and the exact requests can be compared.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rsi_common.errors import ModelBadRequest
from rsi_common.llm import ModelRequest, ModelResponse, Usage

__all__ = ["RecordingClient", "ScriptItem", "ScriptedModel", "text_response", "tool_response"]

ScriptItem = ModelResponse | Callable[[ModelRequest], ModelResponse] | BaseException
"""A prepared response, a function of the request, or an exception to raise."""


def _usage(request: ModelRequest | None, content: list[dict[str, Any]]) -> Usage:
    out_chars = sum(len(str(b.get("text", ""))) + len(str(b.get("input", ""))) for b in content)
    in_chars = len(request.canonical()) if request is not None else 0
    return Usage(input_tokens=math.ceil(in_chars / 4), output_tokens=max(1, math.ceil(out_chars / 4)))


def text_response(text: str, *, input_tokens: int = 10, output_tokens: int | None = None,
                  model: str = "scripted-1", stop_reason: str = "end_turn") -> ModelResponse:
    """A response with one text block (usage given or estimated from the text)."""
    out = output_tokens if output_tokens is not None else max(1, math.ceil(len(text) / 4))
    return ModelResponse(content=[{"type": "text", "text": text}],
                         usage=Usage(input_tokens=input_tokens, output_tokens=out),
                         stop_reason=stop_reason, model=model)


def tool_response(name: str, tool_input: Mapping[str, Any] | None = None, *, tool_use_id: str = "tu_1",
                  text: str = "", input_tokens: int = 10, output_tokens: int = 5,
                  model: str = "scripted-1") -> ModelResponse:
    """A response that calls one tool (optionally preceded by a text block)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content.append({"type": "tool_use", "id": tool_use_id, "name": name, "input": dict(tool_input or {})})
    return ModelResponse(content=content, usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
                         stop_reason="tool_use", model=model)


class ScriptedModel:
    """A :class:`~rsi_common.llm.ModelClient` that plays a script and records requests.

    Args:
        script: responses in call order (see :data:`ScriptItem`).
        provider / model: reported like a real client.
        repeat_last: when the script is exhausted, keep returning the last response instead of
            raising :class:`~rsi_common.errors.ModelBadRequest`.

    Attributes:
        requests: every request received, in order (thread-safe append).
    """

    def __init__(self, script: Iterable[ScriptItem] = (), *, provider: str = "scripted",
                 model: str = "scripted-1", repeat_last: bool = False) -> None:
        self.provider = provider
        self.model = model
        self.repeat_last = repeat_last
        self._script: deque[ScriptItem] = deque(script)
        self._last: ScriptItem | None = None
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []

    def push(self, *items: ScriptItem) -> None:
        """Append items to the script."""
        with self._lock:
            self._script.extend(items)

    @property
    def remaining(self) -> int:
        """Items left in the script."""
        return len(self._script)

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Record ``request`` and play the next script item."""
        with self._lock:
            self.requests.append(request)
            if self._script:
                item = self._script.popleft()
                self._last = item
            elif self.repeat_last and self._last is not None:
                item = self._last
            else:
                raise ModelBadRequest(f"ScriptedModel: no scripted response left (call {len(self.requests)})")
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ModelResponse):
            return item
        return item(request)

    def canonical_requests(self, *, with_seed: bool = False) -> list[str]:
        """Canonical JSON of every recorded request (without ``seed`` by default)."""
        return [r.canonical(with_seed=with_seed) for r in self.requests]

    @staticmethod
    def estimate_usage(request: ModelRequest, content: list[dict[str, Any]]) -> Usage:
        """Usage the way the sim model counts it (chars / 4)."""
        return _usage(request, content)


class RecordingClient:
    """Wraps a client: records every request and response and the seconds spent inside it.

    Attributes:
        requests / responses: in call order (failed calls have no response).
        model_seconds: total wall time inside ``inner.complete``.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.provider: str = str(getattr(inner, "provider", ""))
        self.model: str = str(getattr(inner, "model", ""))
        self.requests: list[ModelRequest] = []
        self.responses: list[ModelResponse] = []
        self.model_seconds = 0.0
        self._lock = threading.Lock()

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Forward to the wrapped client and record."""
        t0 = time.perf_counter()
        try:
            response: ModelResponse = self.inner.complete(request)
        finally:
            with self._lock:
                self.model_seconds += time.perf_counter() - t0
                self.requests.append(request)
        with self._lock:
            self.responses.append(response)
        return response

    def canonical_requests(self, *, with_seed: bool = False) -> list[str]:
        """Canonical JSON of every recorded request (without ``seed`` by default)."""
        return [r.canonical(with_seed=with_seed) for r in self.requests]
