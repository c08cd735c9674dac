"""The criteria judge and its verdict cache (docs/algorithm/consolidation.md §3.7)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from rsi_common.llm import ModelClient, complete_json
from rsi_common.stored import safe_text
from rsi_common.world import text_of

__all__ = ["JUDGE_SYSTEM", "CriteriaJudge", "judge_user_prompt", "request_text", "verdict_key"]

SECTION_CHARS = 12_000
REASON_CHARS = 300
HISTORY_MESSAGES = 6
HISTORY_CHARS = 1_500

JUDGE_SYSTEM = (
    "You grade one answer of an AI assistant against one criterion.\n"
    'A REFERENCE ANSWER, when given, shows what the user expected or accepted. "Same substance as '
    'the reference" passes when the same facts, numbers and conclusions appear, in any wording or '
    "order. Do not reward length or style. Use no outside knowledge: judge only what the request, the "
    "answer and the criterion say.\n"
    'Reply with one JSON object and nothing else: {"pass": true|false, "reason": "<one short sentence>"}.'
)


def verdict_key(criterion: str, reference: str | None, request: str, answer: str) -> str:
    """First 32 hex chars of SHA-256 of ``json.dumps([criterion, reference, request, answer])``.

    Python's default separators and ``ensure_ascii=False`` (docs/algorithm/consolidation.md §3.7).
    """
    raw = json.dumps([criterion, reference, request, answer], ensure_ascii=False)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


def _message_text(content: Any) -> str:
    return text_of(content).strip()


def request_text(request: str, history: list[Mapping[str, Any]]) -> str:
    """The judge's view of the request: the last 6 non-blank history messages, then the request."""
    lines: list[str] = []
    for msg in history:
        text = _message_text(msg.get("content"))
        if not text:
            continue
        who = "User" if msg.get("role") == "user" else "Assistant"
        lines.append(f"{who}: {_clip(text, HISTORY_CHARS)}")
    lines = lines[-HISTORY_MESSAGES:]
    if not lines:
        return request
    return "Earlier in this conversation:\n" + "\n".join(lines) + "\n\nCurrent request:\n" + request


def judge_user_prompt(request: str, answer: str, criterion: str, reference: str | None) -> str:
    """The judge's user message: REQUEST, ANSWER, CRITERION and REFERENCE ANSWER sections."""
    parts = [
        "REQUEST:\n" + _clip(request, SECTION_CHARS),
        "ANSWER:\n" + _clip(answer, SECTION_CHARS),
        "CRITERION:\n" + criterion,
    ]
    if reference is not None:
        parts.append("REFERENCE ANSWER:\n" + _clip(reference, SECTION_CHARS))
    return "\n\n".join(parts)


class CriteriaJudge:
    """Grades answers against criteria through a model, with a read-only cache of earlier verdicts.

    Args:
        client: the judge role's model client.
        cache: verdicts of the run's start state (key → ``[pass, reason]``); never written.

    New verdicts are collected in :attr:`new_entries` so the caller can store them with the trial
    (concurrent writers are harmless: the same key means the same inputs).
    """

    def __init__(self, client: ModelClient, cache: Mapping[str, Any] | None = None) -> None:
        self.client = client
        self.cache = cache or {}
        self.new_entries: dict[str, list[Any]] = {}
        self.calls = 0

    def verdict(
        self, request: str, answer: str, criterion: str, reference: str | None = None
    ) -> tuple[bool, str]:
        """``(pass, reason)``; model failures fail the check with a ``judge error`` reason."""
        key = verdict_key(criterion, reference, request, answer)
        hit = self.new_entries.get(key) or self.cache.get(key)
        if hit is not None:
            return bool(hit[0]), str(hit[1])
        self.calls += 1
        try:
            reply = complete_json(
                self.client,
                system=JUDGE_SYSTEM,
                user=judge_user_prompt(request, answer, criterion, reference),
                max_tokens=512,
            )
        except Exception as exc:  # a failed judge call fails the check; it is not cached
            return False, f"judge error: {type(exc).__name__}: {exc}"[:REASON_CHARS]
        if not isinstance(reply, Mapping) or "pass" not in reply:
            return False, "judge returned no verdict"
        said, why = reply.get("pass"), reply.get("reason")  # hostile: read strings and booleans only
        passed = said is True or (isinstance(said, str) and said.lower() == "true")
        reason = safe_text(why if isinstance(why, str) else "", REASON_CHARS)  # stored: no lone surrogate
        self.new_entries[key] = [passed, reason]
        return passed, reason
