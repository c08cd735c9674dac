"""Instruction-override forms: text no harness may hold, whoever wrote it (docs/security/gate.md,
"Instruction overrides").

Each form is a regex over :func:`~rsi_worker.gate.text.leet_fold` text (normalised, look-alikes and
leetspeak mapped, punctuation as single spaces), except the markup forms, which read the
format-stripped text itself. A harness is the agent's standing configuration: an instruction to
ignore rules, to take another role, to reveal secrets, to hide something from the user, to give a
fixed verdict, a chat-markup tag, or an injected "lessons learned" note is never a general habit.
"""

from __future__ import annotations

import re

from rsi_worker.gate.text import leet_fold, strip_format

__all__ = ["MARKUP_FORMS", "OVERRIDE_FORMS", "override_forms"]

_W = r"(?:\s+\w+){0,3}?"
OVERRIDE_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "instruction override",
        re.compile(
            r"\b(?:ignore|disregard|forget|override|bypass|skip|drop|abandon)"
            + _W
            + r"\s+(?:instructions?|rules?|prompts?|guidelines?|directions?|constraints?|polic(?:y|ies)|"
            r"guardrails?|system (?:message|prompt)|safety)\b"
        ),
    ),
    (
        "role reassignment",
        re.compile(
            r"\byou are now\b|\bfrom now on you\b|"
            r"\bact as (?:an? )?(?:unrestricted|unfiltered|jailbroken|dan|developer|admin|root)\b|"
            r"\bdeveloper mode\b|\bjailbr[eo]a?k\w*|\bdo anything now\b|"
            r"\bpretend (?:to be|you are)\b|\bnew (?:system )?instructions?\b"
        ),
    ),
    (
        "secret disclosure",
        re.compile(
            r"\b(?:reveal|disclose|print|output|show|leak|share|send|expose|repeat)"
            + _W
            + r"\s+(?:secrets?|passwords?|credentials?|api keys?|access tokens?|private keys?|"
            r"system prompt|hidden instructions)\b"
        ),
    ),
    (
        "concealment",
        re.compile(
            r"\b(?:do not|don t|never)\s+(?:tell|inform|mention|disclose|reveal|notify)"
            + _W
            + r"\s+(?:the )?(?:user|customer|human|operator)s?\b|"
            r"\bwithout (?:telling|informing|notifying) (?:the )?(?:user|customer|operator)s?\b"
        ),
    ),
    (
        "fixed verdict",
        re.compile(
            r"\b(?:always|only|just)\s+(?:answer|reply|respond|say|output|return|write)\s+(?:with\s+)?"
            r"(?:yes|no|approved?|accepted|true|false|ok|okay|granted|pass(?:ed)?|confirmed)\b|"
            r"\balways\s+(?:approve|accept|grant|confirm)\b"
        ),
    ),
    (
        "grader reference",
        re.compile(
            r"\b(?:grader|rubric|reward model|the judge|judge s|scoring criteria|evaluation criteria)\b"
        ),
    ),
    (
        "injected memory",
        re.compile(
            r"\blessons? learned\b|\bconversation summary\b|"
            r"\bsummary of (?:the|our|this) (?:earlier |previous )?conversation\b"
        ),
    ),
)
"""(label, regex over leet-folded text)."""
MARKUP_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "chat markup",
        re.compile(
            r"</?\s*(?:system|instructions?|turn_context|assistant|tool_result|im_start|im_end)\s*>|"
            r"<\|im_(?:start|end)\|>|\[/?(?:system|inst)\]|^\s*#{1,6}\s*system\b",
            re.IGNORECASE | re.MULTILINE,
        ),
    ),
)
"""(label, regex over the format-stripped text)."""


def override_forms(text: str) -> list[tuple[str, str]]:
    """``(label, matched text)`` of every form ``text`` holds, in table order, one per label."""
    folded = leet_fold(text)
    out: list[tuple[str, str]] = []
    for label, rx in OVERRIDE_FORMS:
        m = rx.search(folded)
        if m is not None:
            out.append((label, m.group(0)))
    base = strip_format(text)
    for label, rx in MARKUP_FORMS:
        m = rx.search(base)
        if m is not None:
            out.append((label, m.group(0)))
    return out
