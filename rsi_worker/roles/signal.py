"""The implicit-signal reader (docs/algorithm/consolidation.md §3.4): what does the user's next message say
about an answer?"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rsi_common.llm import ModelClient, complete_json
from rsi_common.stored import safe_text
from rsi_worker.roles.report_items import reply_text

__all__ = ["SIGNAL_SYSTEM", "implicit_signal", "signal_user_prompt"]

SECTION_CHARS = 6_000
CRITERION_CHARS = 1_000
"""A criterion the reader states, at most (clipped); it is stored with the world's signals."""
KINDS = ("correction", "complaint", "accept", "neutral")

SIGNAL_SYSTEM = (
    "You read the message a user sent right after an AI assistant's answer and classify what it says "
    "about that answer. Kinds:\n"
    "- correction: the answer was wrong, incomplete, misread the request or ignored an instruction, "
    "or the user asks again;\n"
    "- complaint: the content was fine but the user is unhappy with its form (format, length, "
    "language, tone, speed);\n"
    "- accept: explicit approval, thanks or confirmation;\n"
    "- neutral: anything else, including a new topic or building on the answer.\n"
    "For correction or complaint, state ONE criterion, in English, that a better answer to the "
    "earlier request must meet, grounded only in what the next message says.\n"
    'Reply with one JSON object: {"kind": "...", "criterion": "...", "evidence": "<short quote>"}.'
)


def signal_user_prompt(request: str, answer: str, next_message: str) -> str:
    """The reader's user message with the EARLIER REQUEST, ANSWER and NEXT MESSAGE sections."""
    return "\n\n".join(
        [
            "EARLIER REQUEST:\n" + request[:SECTION_CHARS],
            "ANSWER:\n" + answer[:SECTION_CHARS],
            "NEXT MESSAGE:\n" + next_message[:SECTION_CHARS],
        ]
    )


def implicit_signal(client: ModelClient, request: str, answer: str, next_message: str) -> dict[str, Any]:
    """Classify the next message; never raises (a failure is a ``neutral`` verdict with ``error``)."""
    try:
        reply = complete_json(
            client,
            system=SIGNAL_SYSTEM,
            user=signal_user_prompt(request, answer, next_message),
            max_tokens=512,
        )
    except Exception as exc:
        return {"kind": "neutral", "error": f"{type(exc).__name__}: {exc}"[:300]}
    if not isinstance(reply, Mapping):
        return {"kind": "neutral", "error": "no verdict"}
    kind = reply_text(reply.get("kind")).strip().lower()
    if kind not in KINDS:
        kind = "neutral"
    criterion = safe_text(reply_text(reply.get("criterion")), CRITERION_CHARS).strip()
    if kind in ("correction", "complaint") and not criterion:
        kind = "neutral"
    out: dict[str, Any] = {"kind": kind}
    if kind in ("correction", "complaint"):
        out["criterion"] = criterion
    out["evidence"] = safe_text(reply_text(reply.get("evidence")), 300)
    return out
