"""Anthropic Messages API client (official ``anthropic`` SDK, ``client.messages.create``).

Mapping of :class:`~rsi_common.llm.base.ModelRequest` (decisions where the API leaves a choice):

* ``system`` → ``system`` (a plain string, or one text block with ``cache_control`` when
  ``"system"`` is a cache point). ``tools`` → ``{name, description, input_schema}``.
* messages keep their blocks; empty text blocks are dropped and an empty message becomes the text
  ``(empty)`` (the API refuses empty content); ``thinking`` blocks are sent back only when they
  carry the ``signature`` the API returned (a ``data`` key marks a redacted block).
* cache points: ``system`` (system block), ``tools`` (last tool), ``last_user`` (last block of the
  last user message) get ``cache_control: {"type": "ephemeral"}``.
* ``thinking_level``: ``low``/``medium``/``high`` → ``{"type": "enabled", "budget_tokens":
  1024/4096/16384}``, a decimal string → that budget, ``adaptive`` → ``{"type": "adaptive"}``; the
  budget is capped at ``max_tokens − 1`` and thinking is left out when that is below 1024.
  ``temperature`` is sent only without thinking (the API requires the default with thinking).
* ``output_schema`` → an extra system text block asking for one JSON object satisfying the schema.
  An instruction works on every model, where the API's structured-output mode does not, and the
  harness may already carry the same instruction (docs/formats.md §5.6 *Prompt* step 5).
* ``seed`` is not sent (the API has none).

Response: ``text``, ``tool_use`` and ``thinking`` blocks (``redacted_thinking`` →
``{"type": "thinking", "thinking": "", "data"}``); other block types are dropped. Usage:
``input_tokens`` = input + cache read + cache write tokens (see :class:`~rsi_common.llm.base.Usage`),
``reasoning_tokens`` = ``output_tokens_details.thinking_tokens`` when reported.

Streaming (:meth:`AnthropicClient.stream`, ``client.messages.stream``): text, thinking and
tool-input JSON deltas are yielded as they arrive; the SDK's accumulated final message goes through
the same :func:`from_wire`, so the response equals the plain call's. An ``error`` event in the
stream, a dropped connection and a stream that ends before ``message_stop`` raise
:class:`~rsi_common.errors.ModelTransientError`; statuses before the stream map as for ``create``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import anthropic as sdk
import httpx

from rsi_common.errors import ModelBadRequest, ModelError, ModelTransientError
from rsi_common.llm.base import ModelRequest, ModelResponse, Usage
from rsi_common.llm.retry import SdkErrors, call_with_retries, classify_sdk_error, client_credentials, scrub
from rsi_common.llm.streaming import ModelChunk, ResponseChunk, TextChunk, ThinkingChunk, ToolCallChunk

if TYPE_CHECKING:
    from rsi_common.config import Settings

__all__ = ["DEFAULT_BASE_URL", "AnthropicClient", "from_wire", "to_wire"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
THINKING_BUDGETS: dict[str, int] = {"low": 1024, "medium": 4096, "high": 16384}
_MIN_BUDGET = 1024
_EPHEMERAL = {"type": "ephemeral"}
_SDK_ERRORS = SdkErrors(sdk.APIStatusError, sdk.APIConnectionError, sdk.APIResponseValidationError)


class AnthropicClient:
    """A :class:`~rsi_common.llm.base.ModelClient` over the Anthropic Messages API.

    Args:
        model: Default model (a request's own ``model`` wins when non-empty).
        settings: Key (``RSI_ANTHROPIC_API_KEY``), base URL, timeout and retry settings.
        base_url: Endpoint override (a role's ``base_url``); default ``settings.anthropic_base_url``.
        sleep: Sleep function of the retry backoff (tests inject one).

    Raises:
        ModelAuthError: No key in settings and no custom base URL.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        settings: Settings,
        *,
        base_url: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_retries: int | None = None,
    ) -> None:
        self.model = model
        key, url, self._policy = client_credentials(
            "anthropic", settings, base_url, max_retries=max_retries, sleep=sleep
        )
        self._sdk = sdk.Anthropic(
            api_key=key,
            base_url=url or DEFAULT_BASE_URL,
            timeout=settings.model_timeout_s,
            max_retries=0,
        )

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request``; see the module docstring for the mapping and the errors."""
        params = to_wire(request, self.model)

        def attempt() -> dict[str, Any]:
            msg = self._sdk.messages.create(**params)
            return dict(msg.to_dict(warnings=False))

        data = call_with_retries(
            attempt,
            self._policy,
            lambda e: classify_sdk_error(e, "anthropic", _SDK_ERRORS, self._policy.secrets),
        )
        return from_wire(data, request.model or self.model)

    def stream(self, request: ModelRequest) -> Iterator[ModelChunk]:
        """Stream ``request`` (module docstring); no retries here (the kernel retries its calls)."""
        params = to_wire(request, self.model)
        final: dict[str, Any] | None = None
        try:
            with self._sdk.messages.stream(**params) as events:
                tool_index: dict[int, int] = {}
                for event in events:
                    chunk = _chunk_of(event, tool_index)
                    if chunk is not None:
                        yield chunk
                    if event.type == "message_stop":
                        final = dict(events.get_final_message().to_dict(warnings=False))
        except Exception as exc:
            raise self._stream_error(exc) from None
        if final is None:
            raise ModelTransientError("anthropic: the stream ended before the message was complete")
        yield ResponseChunk(from_wire(final, request.model or self.model))

    def _stream_error(self, exc: Exception) -> Exception:
        if isinstance(exc, ModelError):
            return exc
        if isinstance(exc, sdk.APIStatusError) and int(getattr(exc, "status_code", 0) or 0) < 400:
            detail = scrub(str(getattr(exc, "message", exc)), self._policy.secrets)[:300]
            return ModelTransientError(f"anthropic: error event in the stream: {detail}")
        if isinstance(exc, httpx.TransportError):
            return ModelTransientError(f"anthropic: the stream broke off ({type(exc).__name__})")
        return classify_sdk_error(exc, "anthropic", _SDK_ERRORS, self._policy.secrets) or exc


def _chunk_of(event: Any, tool_index: dict[int, int]) -> ModelChunk | None:
    """The chunk of one stream event, or ``None``; ``tool_index`` numbers the tool_use blocks."""
    if event.type == "content_block_start" and event.content_block.type == "tool_use":
        tool_index[event.index] = len(tool_index)
        return ToolCallChunk(tool_index[event.index], event.content_block.id, event.content_block.name)
    if event.type != "content_block_delta":
        return None
    delta = event.delta
    if delta.type == "text_delta":
        return TextChunk(delta.text)
    if delta.type == "thinking_delta":
        return ThinkingChunk(delta.thinking)
    if delta.type == "input_json_delta" and event.index in tool_index:
        return ToolCallChunk(tool_index[event.index], arguments=delta.partial_json)
    return None


def thinking_config(level: str | None, max_tokens: int) -> dict[str, Any] | None:
    """The ``thinking`` parameter of a ``thinking_level`` (module docstring), or ``None``.

    Raises:
        ModelBadRequest: An unknown level.
    """
    if level is None or level.strip().lower() in ("", "none", "off"):
        return None
    name = level.strip().lower()
    if name == "adaptive":
        return {"type": "adaptive"}
    if name in THINKING_BUDGETS:
        budget = THINKING_BUDGETS[name]
    elif name.isdigit():
        budget = int(name)
    else:
        raise ModelBadRequest(
            f"anthropic: unknown thinking_level {level!r}; use low, medium, high, adaptive or a token budget"
        )
    budget = min(budget, max_tokens - 1)
    if budget < _MIN_BUDGET:
        return None
    return {"type": "enabled", "budget_tokens": budget}


def to_wire(request: ModelRequest, default_model: str) -> dict[str, Any]:
    """The keyword arguments of ``messages.create`` for ``request`` (``extra_body`` included)."""
    points = set(request.cache_points)
    params: dict[str, Any] = {
        "model": request.model or default_model,
        "max_tokens": request.max_tokens,
        "messages": _messages(request.messages, cache_last_user="last_user" in points),
    }
    system = _system(request.system, request.output_schema, cache="system" in points)
    if system:
        params["system"] = system
    if request.tools:
        tools = [
            {
                "name": t["name"],
                "description": t.get("description", ""),
                "input_schema": t.get("input_schema") or {"type": "object", "properties": {}},
            }
            for t in request.tools
        ]
        if "tools" in points:
            tools[-1]["cache_control"] = dict(_EPHEMERAL)
        params["tools"] = tools
    thinking = thinking_config(request.thinking_level, request.max_tokens)
    if thinking is not None:
        params["thinking"] = thinking
    elif request.temperature is not None:
        params["extra_body"] = {"temperature": request.temperature}
    return params


def _system(system: str, schema: dict[str, Any] | None, *, cache: bool) -> str | list[dict[str, Any]]:
    if schema is None and not cache:
        return system
    blocks: list[dict[str, Any]] = []
    if system:
        blocks.append({"type": "text", "text": system})
        if cache:
            blocks[-1]["cache_control"] = dict(_EPHEMERAL)
    if schema is not None:
        blocks.append(
            {
                "type": "text",
                "text": "Reply with one JSON object that satisfies this JSON schema:\n"
                + json.dumps(schema, ensure_ascii=False),
            }
        )
    return blocks


def _messages(messages: list[dict[str, Any]], *, cache_last_user: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        content = m.get("content", "")
        if isinstance(content, str):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
        else:
            blocks = [w for w in (_block(b) for b in content) if w is not None]
        if not blocks:
            blocks = [{"type": "text", "text": "(empty)"}]
        out.append({"role": m["role"], "content": blocks})
    if cache_last_user:
        for m in reversed(out):
            if m["role"] == "user":
                m["content"][-1]["cache_control"] = dict(_EPHEMERAL)
                break
    # plain strings stay strings on the wire when nothing is attached to them
    for m in out:
        c = m["content"]
        if len(c) == 1 and c[0]["type"] == "text" and "cache_control" not in c[0]:
            m["content"] = c[0]["text"]
    return out


def _block(b: dict[str, Any]) -> dict[str, Any] | None:
    kind = b.get("type")
    if kind == "text":
        text = str(b.get("text", ""))
        return {"type": "text", "text": text} if text else None
    if kind == "tool_use":
        return {"type": "tool_use", "id": b["id"], "name": b["name"], "input": b.get("input") or {}}
    if kind == "tool_result":
        content = b.get("content", "")
        if isinstance(content, list):
            content = [
                w for w in (_block(x) for x in content) if w is not None and w["type"] in ("text", "image")
            ]
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": b["tool_use_id"], "content": content}
        if b.get("is_error"):
            out["is_error"] = True
        return out
    if kind == "thinking":
        if b.get("data"):
            return {"type": "redacted_thinking", "data": b["data"]}
        if b.get("signature"):
            return {"type": "thinking", "thinking": b.get("thinking", ""), "signature": b["signature"]}
        return None
    if kind == "image":
        return {"type": "image", "source": b["source"]}
    return None


def from_wire(data: dict[str, Any], fallback_model: str) -> ModelResponse:
    """A :class:`ModelResponse` from a Messages API response body."""
    content: list[dict[str, Any]] = []
    for b in data.get("content") or []:
        kind = b.get("type")
        if kind == "text":
            content.append({"type": "text", "text": b.get("text") or ""})
        elif kind == "tool_use":
            content.append(
                {"type": "tool_use", "id": b["id"], "name": b["name"], "input": b.get("input") or {}}
            )
        elif kind == "thinking":
            block = {"type": "thinking", "thinking": b.get("thinking") or ""}
            if b.get("signature"):
                block["signature"] = b["signature"]
            content.append(block)
        elif kind == "redacted_thinking":
            content.append({"type": "thinking", "thinking": "", "data": b.get("data") or ""})
    u = data.get("usage") or {}
    read = int(u.get("cache_read_input_tokens") or 0)
    write = int(u.get("cache_creation_input_tokens") or 0)
    details = u.get("output_tokens_details") or {}
    reasoning = details.get("thinking_tokens")
    usage = Usage(
        input_tokens=int(u.get("input_tokens") or 0) + read + write,
        output_tokens=int(u.get("output_tokens") or 0),
        cache_read_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=int(reasoning) if reasoning is not None else None,
    )
    return ModelResponse(
        content=content,
        usage=usage,
        stop_reason=str(data.get("stop_reason") or "end_turn"),
        model=str(data.get("model") or fallback_model),
    )
