"""Pure helpers over Anthropic-style message lists.

Message dicts are treated as immutable once they are in a turn's history: every change builds a
new dict (copy-on-write). Recorded requests and world records can therefore share them safely.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "INTERRUPTED",
    "TokenEstimator",
    "add_note",
    "canonical",
    "estimate_tokens",
    "fix_interrupted",
    "response_text",
    "tool_uses",
    "with_turn_context",
]

INTERRUPTED = "[interrupted] no result was recorded"


def canonical(obj: Any) -> str:
    """Canonical JSON (docs/algorithm/formulas.md conventions); values JSON cannot encode are rendered with
    ``str``."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def estimate_tokens(obj: Any) -> int:
    """``ceil(len(canonical JSON) / 4)`` (docs/formats.md §5.6, project decision)."""
    return math.ceil(len(canonical(obj)) / 4)


class TokenEstimator:
    """Token estimate of ``{system, messages, tools}`` with per-message length memo.

    Messages are immutable (module docstring), so a message's canonical length is computed once;
    the memo keeps the message alive, so ids are never reused while cached.
    """

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Mapping[str, Any], int]] = {}

    def message_chars(self, message: Mapping[str, Any]) -> int:
        """Canonical JSON length of one message."""
        hit = self._memo.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        n = len(canonical(message))
        self._memo[id(message)] = (message, n)
        return n

    def chars(self, system: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> int:
        """Length of ``canonical({"messages": messages, "system": system, "tools": tools})``."""
        head = len(canonical({"system": system, "tools": list(tools)}))
        body = sum(self.message_chars(m) for m in messages) + max(0, len(messages) - 1)
        return head + len(',"messages":[]') + body

    def tokens(self, system: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any],
               extra_chars: int = 0) -> int:
        """``ceil((chars + extra_chars) / 4)``."""
        return math.ceil((self.chars(system, messages, tools) + extra_chars) / 4)


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return list(content)
    return []


def tool_uses(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``tool_use`` blocks of an assistant message."""
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]


def _result_ids(message: Mapping[str, Any]) -> set[str]:
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return set()
    return {str(b.get("tool_use_id")) for b in content
            if isinstance(b, dict) and b.get("type") == "tool_result"}


def fix_interrupted(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Give every ``tool_use`` without a result the error result :data:`INTERRUPTED` (docs/formats.md §7.2).

    The missing results are put first in the next user message (a new dict), or in a new user
    message when the tool use is the last message. Returns a new list; untouched messages are shared.
    """
    out: list[dict[str, Any]] = [m if isinstance(m, dict) else dict(m) for m in messages]
    i = 0
    while i < len(out):
        uses = tool_uses(out[i])
        if uses:
            nxt = out[i + 1] if i + 1 < len(out) else None
            have = _result_ids(nxt) if nxt is not None else set()
            missing = [
                {"type": "tool_result", "tool_use_id": str(u.get("id")), "content": INTERRUPTED,
                 "is_error": True}
                for u in uses if str(u.get("id")) not in have
            ]
            if missing:
                if nxt is not None and nxt.get("role") == "user":
                    out[i + 1] = {**nxt, "content": missing + _blocks(nxt.get("content"))}
                else:
                    out.insert(i + 1, {"role": "user", "content": missing})
        i += 1
    return out


def with_turn_context(messages: Sequence[dict[str, Any]], ctx: str) -> list[dict[str, Any]]:
    """A copy of ``messages`` whose latest user message carries the turn context (docs/formats.md §7.2).

    String content → ``"<turn_context>\\n" + ctx + "\\n</turn_context>\\n\\n" + content``; block
    content → the same text as a leading text block, except that it follows any ``tool_result``
    blocks (providers require tool results first; project decision). Stored history is untouched.
    """
    out = list(messages)
    if not ctx:
        return out
    wrapped = "<turn_context>\n" + ctx + "\n</turn_context>\n\n"
    for i in range(len(out) - 1, -1, -1):
        msg = out[i]
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            out[i] = {**msg, "content": wrapped + content}
        else:
            blocks = _blocks(content)
            n_results = 0
            while n_results < len(blocks) and isinstance(blocks[n_results], dict) \
                    and blocks[n_results].get("type") == "tool_result":
                n_results += 1
            text = {"type": "text", "text": wrapped}
            out[i] = {**msg, "content": [*blocks[:n_results], text, *blocks[n_results:]]}
        break
    return out


def add_note(messages: list[dict[str, Any]], text: str) -> None:
    """Append a kernel note as user text: a text block on a trailing user message, else a new message."""
    if messages and messages[-1].get("role") == "user":
        last = messages[-1]
        messages[-1] = {**last, "content": [*_blocks(last.get("content")), {"type": "text", "text": text}]}
    else:
        messages.append({"role": "user", "content": text})


def response_text(content: Sequence[Mapping[str, Any]]) -> str:
    """The text blocks of a response concatenated (as ``ModelResponse.text``)."""
    return "".join(str(b.get("text", "")) for b in content
                   if isinstance(b, Mapping) and b.get("type") == "text")
