"""The model interface: one request shape, one response shape, one client protocol (docs/formats.md §7.1).

Message convention (Anthropic-style blocks, used by every provider):

* a message is ``{"role": "user" | "assistant", "content": str | [block, ...]}``;
* blocks: ``{"type": "text", "text"}``, ``{"type": "tool_use", "id", "name", "input"}``,
  ``{"type": "tool_result", "tool_use_id", "content": str | [text/image blocks], "is_error": bool}``,
  ``{"type": "thinking", "thinking", "signature"?}``, ``{"type": "image", "source": {...}}``.

The system prompt is a separate field, never a message. Each client maps this convention to its
wire format and back; callers never see provider shapes. Clients are built by
:mod:`rsi_common.llm.factory`, which knows the implementations; this module knows none of them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rsi_common.config import ROLES
from rsi_common.errors import ModelOutputError

__all__ = [
    "COMPACTION_MARKER",
    "COMPACTION_SYSTEM_PROMPT",
    "KERNEL_NOTE_TAG",
    "ROLE_NAMES",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "Usage",
    "canonical_json",
    "complete_json",
    "parse_json_object",
    "text_of",
    "tool_uses",
]

ROLE_NAMES: tuple[str, ...] = ("policy", "compact", *ROLES, "digester", "reporter")
"""Roles a client can be built for: the agent's policy, context compaction, the five docs/formats.md §6
roles, and offline evolve's digester and reporter (docs/algorithm/evolve.md#analysis; no settings
override: they use the run's model)."""

COMPACTION_MARKER = "Summarise the conversation so far for context compaction"
"""A request whose system prompt starts with this text is a compaction call (the sim answers it
with its deterministic summary whatever role its client was built for)."""

COMPACTION_SYSTEM_PROMPT = (
    COMPACTION_MARKER + ". Keep the user's goals, decisions, facts, numbers and open tasks; drop small talk. "
    "Reply with the summary only."
)
"""Suggested system prompt of the kernel's ``compact`` calls (docs/formats.md §5.6 *Context*)."""


KERNEL_NOTE_TAG = "<kernel_note>"
"""A user message whose text starts with this tag is a note the kernel added (a review or budget
reminder, docs/formats.md §7.2), never the user's input; models, the sim included, tell the two apart by
it."""


def canonical_json(x: Any) -> str:
    """Canonical JSON (docs/algorithm/formulas.md conventions): sorted keys, no spaces, non-ASCII kept."""
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class ModelRequest:
    """One model call (docs/formats.md §7.1). Treat the lists and dicts as read-only.

    Attributes:
        model: Provider model name; clients fall back to their own model when empty.
        system: System prompt text.
        messages: Conversation in the block convention of this module.
        tools: ``{name, description, input_schema}`` objects offered to the model.
        max_tokens: Output token limit of this call.
        temperature: Sampling temperature, ``None`` = provider default.
        thinking_level: ``None``/``"none"``/``"off"`` (no thinking), ``"low"``, ``"medium"``,
            ``"high"``, ``"adaptive"`` or a decimal thinking budget in tokens (``"2048"``).
        cache_points: Prompt-cache points among ``"system"``, ``"tools"``, ``"last_user"``.
        output_schema: JSON schema the answer must satisfy, or ``None``.
        seed: ``None`` on live turns, the trial index in replays (docs/formats.md §4.2).
    """

    model: str
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int = 8192
    temperature: float | None = None
    thinking_level: str | None = None
    cache_points: list[str] = field(default_factory=list)
    output_schema: dict[str, Any] | None = None
    seed: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The request as a JSON object (a deep copy)."""
        return copy.deepcopy(
            {
                "model": self.model,
                "system": self.system,
                "messages": self.messages,
                "tools": self.tools,
                "max_tokens": self.max_tokens,
                "temperature": self.temperature,
                "thinking_level": self.thinking_level,
                "cache_points": self.cache_points,
                "output_schema": self.output_schema,
                "seed": self.seed,
            }
        )

    def canonical(self, *, with_seed: bool = False) -> str:
        """Canonical JSON of :meth:`to_json`; without ``seed`` unless ``with_seed`` (docs/formats.md §4.2)."""
        obj = self.to_json()
        if not with_seed:
            del obj["seed"]
        return canonical_json(obj)


@dataclass(frozen=True)
class Usage:
    """Token usage of one call.

    ``input_tokens`` counts every input token the provider processed, cached or not, so that
    ``input_tokens + output_tokens`` means the same for every provider (c(τ), docs/formats.md §7.4);
    ``cache_read_tokens`` / ``cache_write_tokens`` are the cached subsets. ``reasoning_tokens``
    (a subset of ``output_tokens``) is ``None`` when the provider does not report it.
    """

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens

    def to_json(self) -> dict[str, Any]:
        """The usage as a JSON object (``reasoning_tokens`` omitted when unknown)."""
        out: dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }
        if self.reasoning_tokens is not None:
            out["reasoning_tokens"] = self.reasoning_tokens
        return out


@dataclass(frozen=True)
class ModelResponse:
    """The assistant message of one call, with usage.

    Attributes:
        content: Blocks ``text``, ``tool_use {id, name, input}``, ``thinking {thinking, signature?}``.
        usage: Token usage.
        stop_reason: ``end_turn``, ``tool_use``, ``max_tokens``, ``refusal`` or the provider's value.
        model: Model that answered.
    """

    content: list[dict[str, Any]]
    usage: Usage
    stop_reason: str
    model: str

    @property
    def text(self) -> str:
        """Concatenated text of the ``text`` blocks."""
        return text_of(self.content)

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The ``tool_use`` blocks, in order."""
        return tool_uses(self.content)

    def message(self) -> dict[str, Any]:
        """The reply as an assistant message to append to the history (a deep copy)."""
        return {"role": "assistant", "content": copy.deepcopy(self.content)}


@runtime_checkable
class ModelClient(Protocol):
    """A model endpoint. Implementations: ``sim``, ``anthropic``, ``openai``.

    ``complete`` raises :class:`~rsi_common.errors.ModelTransientError` (rate limit, timeout,
    connection error or 5xx, after the client's own retries), :class:`~rsi_common.errors.ModelAuthError`
    or :class:`~rsi_common.errors.ModelBadRequest`. Clients are safe to share between threads.
    """

    provider: str
    model: str

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` with one assistant message."""
        ...


def text_of(content: str | list[dict[str, Any]] | ModelResponse) -> str:
    """Text of a message content, a block list or a response: its ``text`` blocks concatenated."""
    if isinstance(content, ModelResponse):
        content = content.content
    if isinstance(content, str):
        return content
    return "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")


def tool_uses(content: str | list[dict[str, Any]] | ModelResponse) -> list[dict[str, Any]]:
    """The ``tool_use`` blocks of a message content, a block list or a response, in order."""
    if isinstance(content, ModelResponse):
        content = content.content
    if isinstance(content, str):
        return []
    return [b for b in content if b.get("type") == "tool_use"]


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in ``text``: the whole text if it is one, else the first ``{…}`` span that
    decodes to an object (so fenced or prefixed replies work); ``None`` when there is none — also
    when the reply nests too deeply to decode (a hostile reply is never an exception here)."""
    stripped = text.strip()
    try:
        whole = json.loads(stripped)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        return whole
    decoder = json.JSONDecoder()
    start = stripped.find("{")
    while start != -1:
        try:
            obj, _ = decoder.raw_decode(stripped, start)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict):
            return obj
        start = stripped.find("{", start + 1)
    return None


_JSON_NUDGE = "Your reply was not a JSON object. Reply with exactly one JSON object and nothing else."


def complete_json(
    client: ModelClient,
    *,
    system: str,
    user: str,
    seed: int | None = None,
    attempts: int = 3,
    max_tokens: int = 4096,
) -> dict[str, Any]:
    """One JSON call of a role: ask, parse the reply as a JSON object, retry when unparseable.

    Each retry repeats the conversation with the unparseable reply and a short request for one
    JSON object appended (so a deterministic model sees a different request).

    Args:
        client: The role's client.
        system: System prompt.
        user: The single user message.
        seed: Request seed (``None`` live; trial index in replays).
        attempts: Model calls at most (≥ 1).
        max_tokens: Output limit per call.

    Returns:
        The parsed object (:func:`parse_json_object`).

    Raises:
        ModelOutputError: No attempt produced a JSON object.
        ModelError: Any error of ``client.complete`` (not retried here).
    """
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    last = ""
    for _ in range(max(1, attempts)):
        request = ModelRequest(
            model=client.model, system=system, messages=list(messages), max_tokens=max_tokens, seed=seed
        )
        last = client.complete(request).text
        obj = parse_json_object(last)
        if obj is not None:
            return obj
        messages += [
            {"role": "assistant", "content": [{"type": "text", "text": last or "(empty)"}]},
            {"role": "user", "content": _JSON_NUDGE},
        ]
    raise ModelOutputError(
        f"{client.provider}/{client.model} returned no JSON object after {max(1, attempts)} attempt(s); "
        f"last reply starts: {last[:120]!r}"
    )
