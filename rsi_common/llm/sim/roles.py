"""The sim model's judge, implicit-signal reader and compaction summariser (docs/formats.md#sim-4-the-roles).

* ``judge`` reads the docs/algorithm/consolidation.md §3.7 layout (``REQUEST:`` / ``ANSWER:`` /
  ``CRITERION:`` /
  ``REFERENCE ANSWER:`` sections) and replies ``{"pass": bool, "reason": str}``
  (:func:`judge_verdict`).
* ``signal`` reads the docs/algorithm/consolidation.md §3.4 layout (``EARLIER REQUEST:`` / ``ANSWER:`` /
  ``NEXT MESSAGE:``)
  and replies ``{"kind", "criterion", "evidence"}`` (:func:`read_signal`).
* ``compact`` replies with a short deterministic summary of the request's messages
  (:func:`summarize`).

Judge and signal read the last user message laid out in their sections, so a ``complete_json`` retry
(the prompt, the unparseable reply, then a request for JSON) is answered from the prompt.

System prompts are not read: a role client behaves as its role whatever the prompt says.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rsi_common.llm.sim.core import (
    SimCall,
    json_reply,
    message_text,
    parse_sections,
    result_text,
    split_turn_context,
    text_reply,
)
from rsi_common.llm.sim.traits import DETECTORS, facts_from_text, traits_in

__all__ = [
    "JUDGE_SECTIONS",
    "PASS_SHARE",
    "SIGNAL_SECTIONS",
    "compact",
    "judge",
    "judge_verdict",
    "read_signal",
    "signal",
    "summarize",
]

JUDGE_SECTIONS = ("REQUEST", "ANSWER", "CRITERION", "REFERENCE ANSWER")
SIGNAL_SECTIONS = ("EARLIER REQUEST", "ANSWER", "NEXT MESSAGE")
PASS_SHARE = 0.8
"""Share of the reference's facts (or words) an answer must contain when no trait is named."""

CRITERION_PREFIX = "A better answer does this: "
_ERROR_ANSWER = re.compile(r"^\s*\[?(error|exception|traceback)\b", re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_]{4,}")
_CORRECTION_START = re.compile(r"^[\W_]*(?:(?:no|not|wrong|actually)\b|아니)", re.IGNORECASE)
_LEADING_WORD = re.compile(r"^[\W_]*(?:(?:no|not|actually)\b|아니(?:요|오|야)?)[\s,.!:;—–-]*", re.IGNORECASE)
_INSTEAD = re.compile(r"(?<!\w)instead\b", re.IGNORECASE)
_COMPLAINT = ("too long", "too verbose", "hard to read", "format")
_ACCEPT = ("thanks", "thank you", "great", "perfect", "고마워")


def _last_user_text(call: SimCall) -> str:
    for m in reversed(call.request.messages):
        if m.get("role") == "user":
            return message_text(m)
    return ""


def _sections(call: SimCall, headers: tuple[str, ...]) -> dict[str, str]:
    """The sections of the last user message that has any of ``headers`` (``{}`` when none has)."""
    for m in reversed(call.request.messages):
        if m.get("role") == "user":
            found = parse_sections(message_text(m), headers)
            if found:
                return found
    return {}


# --- judge ------------------------------------------------------------------------------------


def judge(call: SimCall) -> list[dict[str, Any]]:
    """Grade one answer against one criterion (docs/algorithm/consolidation.md §3.7 layout)."""
    s = _sections(call, JUDGE_SECTIONS)
    passed, reason = judge_verdict(
        s.get("REQUEST", ""), s.get("ANSWER", ""), s.get("CRITERION", ""), s.get("REFERENCE ANSWER")
    )
    return json_reply({"pass": passed, "reason": reason})


def judge_verdict(
    request: str, answer: str, criterion: str, reference: str | None = None
) -> tuple[bool, str]:
    """docs/formats.md#sim-4-the-roles judge.

    1. The criterion names traits (by trigger; ``in the language of the request`` with a Hangul
       request names ``korean``) → all must be detected in the answer.
    2. Else a non-blank reference → at least 80 % of its ``key: value`` facts must appear in the
       answer (a fact appears when one answer line contains its key and its value,
       case-insensitively), or, when it has none, 80 % of its distinct words of ≥ 4 letters.
    3. Else the answer must be non-blank and not an error (``error``/``exception``/``traceback``
       at its start).

    Returns:
        ``(pass, reason)``; the reason names the missing traits or facts.
    """
    traits = traits_in(criterion, request=request)
    if traits:
        missing = [t for t in traits if not DETECTORS[t](answer)]
        if missing:
            return False, f"missing trait(s): {', '.join(missing)}"
        return True, f"has the trait(s) the criterion asks for: {', '.join(traits)}"
    if reference is not None and reference.strip():
        return _against_reference(answer, reference)
    if not answer.strip():
        return False, "the answer is empty"
    if _ERROR_ANSWER.match(answer):
        return False, "the answer is an error message"
    return True, "the answer is a non-empty answer"


def _against_reference(answer: str, reference: str) -> tuple[bool, str]:
    lines = [ln.casefold() for ln in answer.splitlines()]
    facts = facts_from_text(reference)
    if facts:
        missing = [
            f"{k}: {v}" if v else k
            for k, v in facts
            if not any(k.casefold() in ln and v.casefold() in ln for ln in lines)
        ]
        total, what = len(facts), "facts"
    else:
        words = sorted({w.casefold() for w in _WORD.findall(reference)})
        have = {w.casefold() for w in _WORD.findall(answer)}
        missing = [w for w in words if w not in have]
        total, what = len(words), "words"
    present = total - len(missing)
    if total == 0 or present / total >= PASS_SHARE:
        return True, f"{present} of {total} reference {what} present"
    return (
        False,
        f"missing reference {what}: {', '.join(missing[:8])} ({present} of {total} present, 80% needed)",
    )


# --- implicit-signal reader -------------------------------------------------------------------


def signal(call: SimCall) -> list[dict[str, Any]]:
    """Read the user's next message (docs/algorithm/consolidation.md §3.4 layout)."""
    s = _sections(call, SIGNAL_SECTIONS)
    return json_reply(read_signal(s.get("NEXT MESSAGE", "")))


def _has(text: str, phrases: tuple[str, ...]) -> bool:
    return any(re.search(r"(?<!\w)" + re.escape(p), text, re.IGNORECASE) for p in phrases)


def read_signal(next_message: str) -> dict[str, str]:
    """docs/formats.md#sim-4-the-roles implicit-signal reader.

    ``correction`` when the message starts with no/not/wrong/actually/아니 or contains
    ``instead``; else ``complaint`` when it contains too long/too verbose/hard to read/format;
    else ``accept`` on thanks/thank you/great/perfect/고마워; else ``neutral``. For correction
    and complaint the criterion is ``"A better answer does this: "`` + the message without its
    leading no/not/actually/아니 word (the whole message when nothing else is left); otherwise
    ``""``. ``evidence`` is the message, at most 300 characters.
    """
    msg = next_message.strip()
    if _CORRECTION_START.match(msg) or _INSTEAD.search(msg):
        kind = "correction"
    elif _has(msg, _COMPLAINT):
        kind = "complaint"
    elif _has(msg, _ACCEPT):
        kind = "accept"
    else:
        kind = "neutral"
    criterion = ""
    if kind in ("correction", "complaint"):
        rest = _LEADING_WORD.sub("", msg, count=1).strip()
        criterion = CRITERION_PREFIX + (rest or msg)
    return {"kind": kind, "criterion": criterion, "evidence": msg[:300]}


# --- compaction -------------------------------------------------------------------------------

SUMMARY_LINES = 12
"""Lines kept in a compaction summary (the most recent ones)."""


def compact(call: SimCall) -> list[dict[str, Any]]:
    """Summarise the conversation of a compaction call (:func:`summarize`).

    When the last user message embeds the conversation as a JSON array of messages (the kernel
    sends ``"Conversation to summarise (JSON):\n" + json``), that array is summarised; otherwise
    the request's own messages are.
    """
    embedded = _embedded_messages(_last_user_text(call))
    return text_reply(summarize(embedded if embedded is not None else call.request.messages))


def _embedded_messages(text: str) -> list[dict[str, Any]] | None:
    start = text.find("[")
    if start == -1:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    if isinstance(obj, list) and all(isinstance(m, dict) and "role" in m for m in obj):
        return obj
    return None


def _clip(text: str, n: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def summarize(messages: list[dict[str, Any]]) -> str:
    """A short deterministic summary: ``Earlier conversation (<n> messages):`` then one line per
    message text (``User: …`` / ``Assistant: …``, 160 chars), tool call (``Assistant called <name>``)
    and tool result (``Tool result: …``, 80 chars); only the last 12 lines are kept."""
    lines: list[str] = []
    for m in messages:
        who = "User" if m.get("role") == "user" else "Assistant"
        text = split_turn_context(message_text(m))[1].strip()
        if text:
            lines.append(f"{who}: {_clip(text, 160)}")
        content = m.get("content")
        for b in content if isinstance(content, list) else []:
            if b.get("type") == "tool_use":
                lines.append(f"Assistant called {b.get('name', '')}")
            elif b.get("type") == "tool_result":
                lines.append(f"Tool result: {_clip(result_text(b), 80)}")
    return "\n".join([f"Earlier conversation ({len(messages)} messages):", *lines[-SUMMARY_LINES:]])
