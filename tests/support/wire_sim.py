"""The sim model behind the Anthropic and OpenAI wire formats: a :class:`WireServer` responder.

:class:`WireSim` plays a provider that runs the sim model (docs/formats.md). For each request it

1. converts the body back into a :class:`~rsi_common.llm.ModelRequest` — the inverse of the
   request mapping of :mod:`rsi_common.llm.anthropic` / :mod:`rsi_common.llm.openai`
   (:func:`anthropic_request`, :func:`openai_request`);
2. decides the role the way a provider-side model would, from the request itself
   (:func:`role_of`): a compaction call by its system prompt's marker, each consolidation role by
   its (distinctive) system prompt, anything else is the agent's own turn (``policy``);
3. answers with the sim client of that role — or with a reply scripted for that role
   (:meth:`WireSim.script`) — and converts the :class:`~rsi_common.llm.ModelResponse` into the
   path's wire format (:func:`anthropic_body`, :func:`openai_body`), usage included.

Every answered call is logged as a :class:`Call` (path, role, decoded request, reply text).
A request the responder cannot decode gets an HTTP 400 and lands in :attr:`WireSim.errors`.

Usage::

    sim = WireSim()
    with WireServer(responder=sim) as srv:
        ...  # point a provider's base URL at srv
        sim.roles(ANTHROPIC)  # roles answered on that path, in order
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from functools import cache
from typing import Any

from rsi_common.config import SimConfig
from rsi_common.llm import (
    COMPACTION_MARKER,
    ROLE_NAMES,
    ModelRequest,
    ModelResponse,
    Usage,
    text_of,
    tool_uses,
)
from rsi_common.llm.sim import SimClient, input_tokens, output_tokens
from tests.support.wire_server import (
    ANTHROPIC,
    OPENAI,
    Received,
    Reply,
    anthropic_error,
    anthropic_message,
    openai_completion,
    openai_error,
)

__all__ = [
    "Call",
    "WireSim",
    "anthropic_body",
    "anthropic_request",
    "openai_body",
    "openai_request",
    "role_of",
    "role_systems",
]

SCHEMA_PREFIX = "Reply with one JSON object that satisfies this JSON schema:\n"
"""How :mod:`rsi_common.llm.anthropic` sends ``output_schema`` (an extra system text block)."""
ERROR_PREFIX = "Error: "
"""How :mod:`rsi_common.llm.openai` marks an error ``tool_result`` (the API has no error flag)."""


# --- the role of a request ------------------------------------------------------------------------


@cache
def role_systems() -> dict[str, str]:
    """System prompt → role, for the consolidation roles (from the role modules themselves)."""
    from rsi_worker.roles.analyst import ANALYST_SYSTEM
    from rsi_worker.roles.critic import CRITIC_SYSTEM
    from rsi_worker.roles.judge import JUDGE_SYSTEM
    from rsi_worker.roles.proposer import proposer_system
    from rsi_worker.roles.signal import SIGNAL_SYSTEM

    return {
        JUDGE_SYSTEM.strip(): "judge",
        SIGNAL_SYSTEM.strip(): "signal",
        ANALYST_SYSTEM.strip(): "analyst",
        proposer_system().strip(): "proposer",
        CRITIC_SYSTEM.strip(): "critic",
    }


def role_of(request: ModelRequest) -> str:
    """``compact``, a consolidation role, or ``policy`` (the agent's own turn)."""
    system = request.system.strip()
    if system.startswith(COMPACTION_MARKER):
        return "compact"
    return role_systems().get(system, "policy")


# --- Anthropic Messages ---------------------------------------------------------------------------


def anthropic_request(body: dict[str, Any]) -> ModelRequest:
    """The request behind a Messages API body (inverse of ``rsi_common.llm.anthropic.to_wire``)."""
    points: list[str] = []
    schema: dict[str, Any] | None = None
    raw_system = body.get("system") or ""
    if isinstance(raw_system, list):
        texts: list[str] = []
        for b in raw_system:
            text = str(b.get("text", ""))
            if text.startswith(SCHEMA_PREFIX):
                schema = json.loads(text[len(SCHEMA_PREFIX) :])
                continue
            if b.get("cache_control"):
                points.append("system")
            texts.append(text)
        system = "\n\n".join(texts)
    else:
        system = str(raw_system)
    tools: list[dict[str, Any]] = []
    for t in body.get("tools") or []:
        if t.get("cache_control"):
            points.append("tools")
        tools.append(
            {
                "name": t["name"],
                "description": t.get("description", ""),
                "input_schema": t.get("input_schema") or {},
            }
        )
    messages: list[dict[str, Any]] = []
    for m in body.get("messages") or []:
        content = m.get("content", "")
        if isinstance(content, str):
            messages.append({"role": m["role"], "content": content})
            continue
        if m["role"] == "user" and any(b.get("cache_control") for b in content):
            points.append("last_user")
        messages.append({"role": m["role"], "content": [_from_anthropic_block(b) for b in content]})
    thinking = body.get("thinking") or {}
    level = None
    if thinking.get("type") == "enabled":
        level = str(thinking.get("budget_tokens"))
    elif thinking.get("type") == "adaptive":
        level = "adaptive"
    return ModelRequest(
        model=str(body.get("model") or ""),
        system=system,
        messages=messages,
        tools=tools,
        max_tokens=int(body.get("max_tokens") or 0),
        temperature=body.get("temperature"),
        thinking_level=level,
        cache_points=points,
        output_schema=schema,
        seed=None,  # the Messages API has no seed
    )


def _from_anthropic_block(b: dict[str, Any]) -> dict[str, Any]:
    kind = b.get("type")
    if kind == "text":
        return {"type": "text", "text": str(b.get("text", ""))}
    if kind == "tool_use":
        return {"type": "tool_use", "id": b["id"], "name": b["name"], "input": b.get("input") or {}}
    if kind == "tool_result":
        content = b.get("content", "")
        if isinstance(content, list):
            content = [_from_anthropic_block(x) for x in content]
        return {
            "type": "tool_result",
            "tool_use_id": b["tool_use_id"],
            "content": content,
            "is_error": bool(b.get("is_error")),
        }
    if kind == "thinking":
        return {"type": "thinking", "thinking": b.get("thinking", ""), "signature": b.get("signature", "")}
    if kind == "redacted_thinking":
        return {"type": "thinking", "thinking": "", "data": b.get("data", "")}
    if kind == "image":
        return {"type": "image", "source": b["source"]}
    raise ValueError(f"unknown Anthropic content block type {kind!r}")


def anthropic_body(response: ModelResponse) -> dict[str, Any]:
    """A Messages API response body for ``response``."""
    blocks: list[dict[str, Any]] = []
    for b in response.content:
        if b.get("type") == "text":
            blocks.append({"type": "text", "text": b["text"]})
        elif b.get("type") == "tool_use":
            blocks.append(
                {"type": "tool_use", "id": b["id"], "name": b["name"], "input": b.get("input") or {}}
            )
    usage = {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens}
    return anthropic_message(blocks, stop_reason=response.stop_reason, usage=usage, model=response.model)


# --- OpenAI Chat Completions ----------------------------------------------------------------------


def openai_request(body: dict[str, Any]) -> ModelRequest:
    """The request behind a Chat Completions body (inverse of ``rsi_common.llm.openai.to_wire``).

    ``tool`` messages become ``tool_result`` blocks of one user message, together with the user
    message that follows them directly (the client splits one user message that way).
    """
    systems: list[str] = []
    messages: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []

    def flush() -> None:
        if results:
            messages.append({"role": "user", "content": list(results)})
            results.clear()

    for m in body.get("messages") or []:
        role, content = m["role"], m.get("content")
        if role in ("system", "developer"):
            systems.append(_openai_text(content))
        elif role == "tool":
            text = _openai_text(content)
            error = text.startswith(ERROR_PREFIX)
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": m["tool_call_id"],
                    "content": text[len(ERROR_PREFIX) :] if error else text,
                    "is_error": error,
                }
            )
        elif role == "user":
            if results:
                messages.append({"role": "user", "content": [*results, *_openai_parts(content)]})
                results.clear()
            else:
                messages.append(
                    {
                        "role": "user",
                        "content": content if isinstance(content, str) else _openai_parts(content),
                    }
                )
        elif role == "assistant":
            flush()
            calls = m.get("tool_calls") or []
            if not calls:
                messages.append({"role": "assistant", "content": _openai_text(content)})
                continue
            blocks: list[dict[str, Any]] = []
            if _openai_text(content):
                blocks.append({"type": "text", "text": _openai_text(content)})
            for call in calls:
                fn = call["function"]
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": fn["name"],
                        "input": json.loads(fn.get("arguments") or "{}"),
                    }
                )
            messages.append({"role": "assistant", "content": blocks})
        else:
            raise ValueError(f"unknown Chat Completions message role {role!r}")
    flush()
    fmt = body.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") if fmt.get("type") == "json_schema" else None
    return ModelRequest(
        model=str(body.get("model") or ""),
        system="\n\n".join(systems),
        messages=messages,
        tools=[
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters") or {},
            }
            for t in body.get("tools") or []
        ],
        max_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or 0),
        temperature=body.get("temperature"),
        thinking_level=body.get("reasoning_effort"),
        output_schema=schema,
        seed=body.get("seed"),
    )


def _openai_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")


def _openai_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for p in content or []:
        if p.get("type") == "text":
            blocks.append({"type": "text", "text": str(p.get("text", ""))})
        elif p.get("type") == "image_url":
            url = str((p.get("image_url") or {}).get("url", ""))
            if url.startswith("data:") and ";base64," in url:
                media, data = url[len("data:") :].split(";base64,", 1)
                blocks.append(
                    {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
                )
            else:
                blocks.append({"type": "image", "source": {"type": "url", "url": url}})
    return blocks


def openai_body(response: ModelResponse) -> dict[str, Any]:
    """A Chat Completions response body for ``response``."""
    calls = [(b["id"], b["name"], b.get("input") or {}) for b in tool_uses(response.content)]
    usage = {
        "prompt_tokens": response.usage.input_tokens,
        "completion_tokens": response.usage.output_tokens,
        "total_tokens": response.usage.total_tokens,
    }
    return openai_completion(
        text_of(response.content) or None, tool_calls=calls or None, usage=usage, model=response.model
    )


# --- the responder --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One answered request: its path, the role decided, the decoded request, the reply's text and
    usage, and whether the reply was scripted."""

    path: str
    role: str
    request: ModelRequest
    reply: str
    usage: Usage
    scripted: bool = False


class WireSim:
    """A :class:`WireServer` responder running the sim model in the role each request asks for.

    Args:
        config: The sim's knobs (default :class:`SimConfig` defaults).
    """

    def __init__(self, config: SimConfig | None = None) -> None:
        self.clients = {role: SimClient("sim-1", config, role=role) for role in ROLE_NAMES}
        self.calls: list[Call] = []
        self.errors: list[str] = []
        self._scripts: dict[str, deque[str]] = {}
        self._lock = threading.Lock()

    def script(self, role: str, *texts: str) -> None:
        """Answer the next requests of ``role`` with ``texts`` (one text reply each), then the sim."""
        with self._lock:
            self._scripts.setdefault(role, deque()).extend(texts)

    def roles(self, path: str | None = None) -> list[str]:
        """Roles answered (on ``path``, default every path), in order."""
        with self._lock:
            return [c.role for c in self.calls if path is None or c.path == path]

    def of(self, role: str) -> list[Call]:
        """The answered calls of ``role``, in order."""
        with self._lock:
            return [c for c in self.calls if c.role == role]

    def __call__(self, received: Received) -> Reply:
        error = anthropic_error if received.path == ANTHROPIC else openai_error
        try:
            if received.path == ANTHROPIC:
                request = anthropic_request(received.body)
            elif received.path == OPENAI:
                request = openai_request(received.body)
            else:
                raise ValueError(f"unknown path {received.path}")
            role = role_of(request)
            with self._lock:
                queue = self._scripts.get(role)
                scripted = queue.popleft() if queue else None
            if scripted is not None:
                content = [{"type": "text", "text": scripted}]
                usage = Usage(input_tokens(request), output_tokens(content))
                response = ModelResponse(
                    content=content, usage=usage, stop_reason="end_turn", model=request.model
                )
            else:
                response = self.clients[role].complete(request)
            with self._lock:
                self.calls.append(
                    Call(received.path, role, request, response.text, response.usage, scripted is not None)
                )
        except Exception as exc:  # a request the responder cannot decode: the client sees a 400
            message = f"wire sim: {type(exc).__name__}: {exc}"
            with self._lock:
                self.errors.append(message)
            return error(400, message, "invalid_request_error")
        body = anthropic_body(response) if received.path == ANTHROPIC else openai_body(response)
        return Reply(body=body)
