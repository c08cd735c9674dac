"""Shared pieces of the sim model's role behaviours: the call, the turn, the section parser.

A role behaviour is a :data:`SimHandler`: it receives a :class:`SimCall` and returns the reply's
content blocks. Handlers are pure functions of the call (the request and the call seed), so a
call repeats identically.

**How the sim reads a conversation** (contract for the kernel and the roles):

* The text of a message is its string content, or its ``text`` blocks joined by ``"\\n"``.
* A leading ``<turn_context>…</turn_context>`` block (docs/formats.md §7.2 stage *call*) is cut from the text.
  The turn context of the *last* user message counts as system-side text (its words can trigger
  traits, as they would with ``volatile_placement = "system"``); it is never the user's input.
* A user message whose text starts with ``<kernel_note>`` is a kernel note, never the input.
* **The turn's input** is the last user message that still has text after those rules (a message
  of only ``tool_result`` blocks has none).
* **This turn** is every message after the input: its ``tool_use`` blocks are the calls made in
  this turn, its non-error ``tool_result`` blocks the results the answer draws facts from.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi_common.config import SimConfig
from rsi_common.llm.base import KERNEL_NOTE_TAG, ModelRequest, canonical_json

__all__ = [
    "SimCall",
    "SimHandler",
    "Turn",
    "find_turn",
    "json_reply",
    "message_text",
    "parse_sections",
    "result_text",
    "seed_of",
    "split_turn_context",
    "text_reply",
]

_CONTEXT = re.compile(r"^\s*<turn_context>\s*(.*?)\s*</turn_context>\s*", re.DOTALL)


@dataclass(frozen=True)
class SimCall:
    """One sim model call.

    Attributes:
        request: The request.
        role: The role the client was built for.
        config: The sim's knobs (docs/formats.md#sim-1-configuration).
        seed: The call seed, 32 bytes: SHA-256 of the global seed, the role, the messages and
            the request seed (see :func:`rsi_common.llm.sim.client.call_seed`).
    """

    request: ModelRequest
    role: str
    config: SimConfig
    seed: bytes

    def draw(self, label: str) -> float:
        """A uniform number in [0, 1) fixed by the call seed and ``label`` (one stream per use:
        ``"error"``, ``"jitter"``, ``"noise:<trait>"``, …)."""
        digest = hashlib.sha256(self.seed + b"\x00" + label.encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64


SimHandler = Callable[[SimCall], list[dict[str, Any]]]
"""A role behaviour: the call → the reply's content blocks."""


def text_reply(text: str) -> list[dict[str, Any]]:
    """A reply of one text block."""
    return [{"type": "text", "text": text}]


def json_reply(obj: Any) -> list[dict[str, Any]]:
    """A reply of one text block holding ``obj`` as JSON (non-ASCII kept)."""
    return text_reply(json.dumps(obj, ensure_ascii=False))


def message_text(message: dict[str, Any]) -> str:
    """The text of a message: string content, or its text blocks joined by ``"\\n"``."""
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")


def split_turn_context(text: str) -> tuple[str, str]:
    """``(turn context, rest)`` of a user text; the context is ``""`` when there is none."""
    m = _CONTEXT.match(text)
    if m is None:
        return "", text
    return m.group(1), text[m.end() :]


def result_text(block: dict[str, Any]) -> str:
    """The text of a ``tool_result`` block's content."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
    return str(content)


@dataclass(frozen=True)
class Turn:
    """The current turn as the sim sees it (module docstring)."""

    input: str
    """The user's input, turn context removed; ``""`` when there is none."""
    context: str
    """The turn context of the last user message (system-side text)."""
    tool_uses: list[dict[str, Any]] = field(default_factory=list)
    """``tool_use`` blocks after the input, in order."""
    results: list[dict[str, Any]] = field(default_factory=list)
    """Non-error ``tool_result`` blocks after the input, in order."""


def find_turn(messages: Sequence[dict[str, Any]]) -> Turn:
    """Locate the turn's input, its turn context and this turn's tool traffic."""
    context = ""
    for m in reversed(messages):
        if m.get("role") == "user":
            context = split_turn_context(message_text(m))[0]
            break
    start, text = -1, ""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") != "user":
            continue
        rest = split_turn_context(message_text(m))[1].strip()
        if rest and not rest.startswith(KERNEL_NOTE_TAG):
            start, text = i, rest
            break
    uses: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for m in messages[start + 1 :]:
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for b in content:
            if b.get("type") == "tool_use" and m.get("role") == "assistant":
                uses.append(b)
            elif b.get("type") == "tool_result" and not b.get("is_error"):
                results.append(b)
    return Turn(input=text, context=context, tool_uses=uses, results=results)


def parse_sections(text: str, headers: Sequence[str]) -> dict[str, str]:
    """Split a role prompt laid out as ``HEADER:\\n<body>`` sections
    (docs/algorithm/consolidation.md §3.4, §3.7).

    Headers are searched at line starts in the given order, each after the previous one, so a
    body may contain any text except the next header line. Bodies are stripped; a missing header
    yields no key.
    """
    out: dict[str, str] = {}
    found: list[tuple[str, int, int]] = []
    pos = 0
    for header in headers:
        m = re.compile(r"(?m)^" + re.escape(header) + r":[ \t]*\n?").search(text, pos)
        if m is None:
            continue
        found.append((header, m.start(), m.end()))
        pos = m.end()
    for i, (header, _, body_start) in enumerate(found):
        end = found[i + 1][1] if i + 1 < len(found) else len(text)
        out[header] = text[body_start:end].strip()
    return out


def seed_of(global_seed: int, role: str, request: ModelRequest) -> bytes:
    """SHA-256 of canonical JSON ``[global seed, role, messages, request seed]``
    (docs/formats.md#sim-1-configuration)."""
    return hashlib.sha256(
        canonical_json([global_seed, role, request.messages, request.seed]).encode("utf-8")
    ).digest()
