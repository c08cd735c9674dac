"""OpenAI Chat Completions client (official ``openai`` SDK).

Chat Completions, not Responses, so that any OpenAI-compatible server (vLLM, Ollama, …) works
through ``base_url``. Mapping of :class:`~rsi_common.llm.base.ModelRequest`:

* ``system`` → a leading ``{"role": "system"}`` message (omitted when empty).
* a user message: its ``tool_result`` blocks become ``{"role": "tool", "tool_call_id", "content"}``
  messages first (the API wants them right after the assistant's ``tool_calls``; an error result's
  text is prefixed ``"Error: "``, the API having no error flag), then its text/image blocks form
  one user message (a plain string when there are no images).
* an assistant message: text blocks → ``content``, ``tool_use`` → ``tool_calls`` (``arguments`` =
  JSON of ``input``); ``thinking`` blocks are not sent back.
* ``tools`` → ``{"type": "function", "function": {name, description, parameters}}``.
* ``max_tokens`` → ``max_completion_tokens`` on api.openai.com, ``max_tokens`` on a custom
  ``base_url`` (what OpenAI-compatible servers accept); ``temperature`` and ``seed`` as is;
  ``thinking_level`` ``minimal``/``low``/``medium``/``high`` → ``reasoning_effort`` (others are
  not sent); ``output_schema`` → ``response_format`` ``json_schema`` (name ``output``, not strict);
  ``cache_points`` are ignored (the API caches by itself).

Response: ``content`` → a text block, ``tool_calls`` → ``tool_use`` blocks (arguments that are not
a JSON object → ``{"_raw_arguments": str}``), a server's ``reasoning_content``/``reasoning`` field
→ a leading ``thinking`` block. ``finish_reason`` ``stop``/``tool_calls``/``length``/
``content_filter`` → ``end_turn``/``tool_use``/``max_tokens``/``refusal``. Usage: ``prompt_tokens``
(which already include cached tokens), ``completion_tokens``,
``prompt_tokens_details.cached_tokens`` → cache reads, ``completion_tokens_details.reasoning_tokens``.

Streaming (:meth:`OpenAIClient.stream`, ``chat.completions.create(stream=True)`` with
``stream_options.include_usage``): content and reasoning deltas are yielded as they arrive, tool
calls are assembled from their deltas by ``index``, usage is read from the final usage chunk; the
assembled completion goes through the same :func:`from_wire`, so the response equals the plain
call's. An error in the stream, a dropped connection and a stream without a ``finish_reason`` raise
:class:`~rsi_common.errors.ModelTransientError`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import openai as sdk

from rsi_common.errors import ModelBadRequest, ModelError, ModelTransientError
from rsi_common.llm.base import ModelRequest, ModelResponse, Usage
from rsi_common.llm.retry import SdkErrors, call_with_retries, classify_sdk_error, client_credentials, scrub
from rsi_common.llm.streaming import (
    ModelChunk,
    ResponseChunk,
    TextChunk,
    ThinkingChunk,
    ToolCallAssembler,
    ToolCallChunk,
)

if TYPE_CHECKING:
    from rsi_common.config import Settings

__all__ = ["DEFAULT_BASE_URL", "OpenAIClient", "from_wire", "to_wire"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
REASONING_EFFORTS = frozenset({"minimal", "low", "medium", "high"})
_FINISH = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}
_SDK_ERRORS = SdkErrors(sdk.APIStatusError, sdk.APIConnectionError, sdk.APIResponseValidationError)


class OpenAIClient:
    """A :class:`~rsi_common.llm.base.ModelClient` over Chat Completions.

    Args:
        model: Default model (a request's own ``model`` wins when non-empty).
        settings: Key (``RSI_OPENAI_API_KEY``), base URL, timeout and retry settings.
        base_url: Endpoint override (a role's ``base_url``); default ``settings.openai_base_url``.
        sleep: Sleep function of the retry backoff (tests inject one).
        api_key: Key to use instead of the setting (a provider preset's key).
        provider: Name of the service in messages and records (a preset's name; default ``openai``).

    Raises:
        ModelAuthError: No key in settings and no custom base URL (local servers need none).
    """

    provider = "openai"

    def __init__(
        self,
        model: str,
        settings: Settings,
        *,
        base_url: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_retries: int | None = None,
        api_key: str | None = None,
        provider: str = "openai",
    ) -> None:
        self.model = model
        self.provider = provider
        key, url, self._policy = client_credentials(
            "openai", settings, base_url, max_retries=max_retries, sleep=sleep, api_key=api_key
        )
        self._official = url is None
        self._sdk = sdk.OpenAI(
            api_key=key,
            base_url=url or DEFAULT_BASE_URL,
            timeout=settings.model_timeout_s,
            max_retries=0,
        )

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request``; see the module docstring for the mapping and the errors."""
        params = to_wire(request, self.model, official=self._official)

        def attempt() -> dict[str, Any]:
            completion = self._sdk.chat.completions.create(**params)
            return dict(completion.to_dict(warnings=False))

        data = call_with_retries(
            attempt,
            self._policy,
            lambda e: classify_sdk_error(e, self.provider, _SDK_ERRORS, self._policy.secrets),
        )
        return from_wire(data, request.model or self.model)

    def stream(self, request: ModelRequest) -> Iterator[ModelChunk]:
        """Stream ``request`` (module docstring); no retries here (the kernel retries its calls)."""
        params = to_wire(request, self.model, official=self._official)
        params.update(stream=True, stream_options={"include_usage": True})
        state = _StreamState()
        try:
            with self._sdk.chat.completions.create(**params) as chunks:
                for chunk in chunks:
                    yield from state.add(chunk.to_dict(warnings=False))
        except Exception as exc:
            raise self._stream_error(exc) from None
        if state.finish is None:
            raise ModelTransientError(f"{self.provider}: the stream ended before the completion was complete")
        yield ResponseChunk(from_wire(state.body(), request.model or self.model))

    def _stream_error(self, exc: Exception) -> Exception:
        if isinstance(exc, ModelError):
            return exc
        known = classify_sdk_error(exc, self.provider, _SDK_ERRORS, self._policy.secrets)
        if known is not None:
            return known
        if isinstance(exc, httpx.TransportError):
            return ModelTransientError(f"{self.provider}: the stream broke off ({type(exc).__name__})")
        if isinstance(exc, sdk.APIError):  # an error object in the stream
            detail = scrub(str(getattr(exc, "message", exc)), self._policy.secrets)[:300]
            return ModelTransientError(f"{self.provider}: error in the stream: {detail}")
        return exc


class _StreamState:
    """What the chunks of one streamed completion add up to."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.tools = ToolCallAssembler()
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.model = ""

    def add(self, data: dict[str, Any]) -> Iterator[ModelChunk]:
        """Fold in one chunk; yield what it carries for the host."""
        self.model = str(data.get("model") or self.model)
        if data.get("usage"):
            self.usage = dict(data["usage"])
        for choice in (data.get("choices") or [])[:1]:
            delta = choice.get("delta") or {}
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thought, str) and thought:
                self.reasoning.append(thought)
                yield ThinkingChunk(thought)
            if delta.get("content"):
                self.text.append(str(delta["content"]))
                yield TextChunk(str(delta["content"]))
            for call in delta.get("tool_calls") or []:
                fn = call.get("function") or {}
                piece = ToolCallChunk(int(call.get("index") or 0), str(call.get("id") or ""),
                                      str(fn.get("name") or ""), str(fn.get("arguments") or ""))
                self.tools.add(piece)
                yield piece
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])

    def body(self) -> dict[str, Any]:
        """The completion body the chunks add up to (what :func:`from_wire` reads)."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        calls = [{"id": c["id"], "type": "function",
                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in self.tools.done()]
        if calls:
            message["tool_calls"] = calls
        choice = {"index": 0, "message": message, "finish_reason": self.finish}
        return {"model": self.model, "choices": [choice], "usage": self.usage}


def to_wire(request: ModelRequest, default_model: str, *, official: bool = True) -> dict[str, Any]:
    """The keyword arguments of ``chat.completions.create`` for ``request``."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for m in request.messages:
        messages += _message(m)
    params: dict[str, Any] = {"model": request.model or default_model, "messages": messages}
    params["max_completion_tokens" if official else "max_tokens"] = request.max_tokens
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t.get("description", ""),
                    "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
                },
            }
            for t in request.tools
        ]
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.seed is not None:
        params["seed"] = request.seed
    level = (request.thinking_level or "").strip().lower()
    if level in REASONING_EFFORTS:
        params["reasoning_effort"] = level
    if request.output_schema is not None:
        params["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": request.output_schema},
        }
    return params


def _message(m: dict[str, Any]) -> list[dict[str, Any]]:
    role, content = m["role"], m.get("content", "")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if role == "assistant":
        text = "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
        calls = [
            {
                "id": b["id"],
                "type": "function",
                "function": {
                    "name": b["name"],
                    "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False),
                },
            }
            for b in content
            if b.get("type") == "tool_use"
        ]
        out: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
        if calls:
            out["tool_calls"] = calls
        return [out]
    msgs: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for b in content:
        kind = b.get("type")
        if kind == "tool_result":
            text = _result_text(b.get("content", ""))
            msgs.append(
                {
                    "role": "tool",
                    "tool_call_id": b["tool_use_id"],
                    "content": ("Error: " + text) if b.get("is_error") else text,
                }
            )
        elif kind == "text" and b.get("text"):
            parts.append({"type": "text", "text": str(b["text"])})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(b.get("source") or {})}})
    if parts:
        if all(p["type"] == "text" for p in parts):
            msgs.append({"role": role, "content": "\n\n".join(p["text"] for p in parts)})
        else:
            msgs.append({"role": role, "content": parts})
    return msgs


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
    return str(content)


def _image_url(source: dict[str, Any]) -> str:
    if source.get("type") == "url":
        return str(source.get("url", ""))
    return f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"


def from_wire(data: dict[str, Any], fallback_model: str) -> ModelResponse:
    """A :class:`ModelResponse` from a Chat Completions response body.

    Raises:
        ModelBadRequest: The response has no choice.
    """
    choices = data.get("choices") or []
    if not choices:
        raise ModelBadRequest("openai: the response has no choices")
    choice = choices[0]
    msg = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning})
    if msg.get("content"):
        content.append({"type": "text", "text": str(msg["content"])})
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        raw = fn.get("arguments") or "{}"
        try:
            args = json.loads(raw)
        except ValueError:
            args = None
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or "",
                "name": fn.get("name") or "",
                "input": args if isinstance(args, dict) else {"_raw_arguments": raw},
            }
        )
    finish = str(choice.get("finish_reason") or "stop")
    return ModelResponse(
        content=content,
        usage=_usage(data.get("usage") or {}),
        stop_reason=_FINISH.get(finish, finish),
        model=str(data.get("model") or fallback_model),
    )


def _usage(u: dict[str, Any]) -> Usage:
    prompt_details = u.get("prompt_tokens_details") or {}
    completion_details = u.get("completion_tokens_details") or {}
    reasoning = completion_details.get("reasoning_tokens")
    return Usage(
        input_tokens=int(u.get("prompt_tokens") or 0),
        output_tokens=int(u.get("completion_tokens") or 0),
        cache_read_tokens=int(prompt_details.get("cached_tokens") or 0),
        reasoning_tokens=int(reasoning) if reasoning is not None else None,
    )
