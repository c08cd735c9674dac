"""The pattern precheck (docs/formats.md §6.2 stage 1): fixed patterns over the text a candidate adds.

The critic's first stage, run by the gate's screen (:mod:`~rsi_worker.gate.screen`) before any model
sees the candidate, and again by :func:`rsi_worker.roles.critic.review`.

It scans *added* content only: each ``+`` line (not ``+++``) without its marker and each ``+++`` path
without a leading ``b/``. Every line is scanned as written and, when it holds JSON string literals
(as the lines of ``manifest.json`` do), also with those literals decoded, so an escaped quote cannot
hide a match (project decision). Patterns: the credential table of :mod:`rsi_common.credentials`
(text normalised first, so a zero-width character inside a key hides nothing;
``docs/security/credentials.md``), the production patterns :data:`PRODUCTION_PATTERNS` and the
per-consolidation :func:`critic_patterns` (docs/algorithm/consolidation.md §3.9). An empty diff → reject
``"empty diff"``; any hit →
reject with reasons ``precheck: <label>``, plus ``: '<snippet>'`` for the world-id, expected-text and
artefact labels — never for credentials.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from rsi_common.credentials import find_credentials

__all__ = [
    "ARTEFACT_LABEL",
    "EXPECTED_LABEL",
    "PRODUCTION_PATTERNS",
    "SNIPPET_LABELS",
    "WORLD_ID_LABEL",
    "Pattern",
    "added_content",
    "critic_patterns",
    "precheck",
]

Pattern = tuple[str, "re.Pattern[str]"]
"""``(label, compiled regex)``."""

WORLD_ID_LABEL = "recorded world id"
EXPECTED_LABEL = "expected answer text"
ARTEFACT_LABEL = "evaluation artefact"
SNIPPET_LABELS = frozenset({WORLD_ID_LABEL, EXPECTED_LABEL, ARTEFACT_LABEL})
PRODUCTION_PATTERNS: tuple[Pattern, ...] = (
    ("platform setting name", re.compile(r"\bRSI_[A-Z0-9_]+")),
    (ARTEFACT_LABEL, re.compile(r"\b(?:outcome|suite|eval|decisions|calibration)\.json\b")),
)
EXPECTED_MIN_CHARS = 24
SNIPPET_CHARS = 80
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def critic_patterns(worlds: Iterable[Any]) -> list[Pattern]:
    """The per-consolidation patterns (docs/algorithm/consolidation.md §3.9), de-duplicated, in world order.

    For each world: its id as a bounded literal (label ``recorded world id``); for each stripped line
    of its ``expected`` signal of at least 24 chars, the escaped line (label ``expected answer text``).
    """
    seen: set[tuple[str, str]] = set()
    out: list[Pattern] = []

    def add(label: str, regex: str) -> None:
        if (label, regex) not in seen:
            seen.add((label, regex))
            out.append((label, re.compile(regex)))

    for w in worlds:
        add(WORLD_ID_LABEL, rf"(?<![A-Za-z0-9_]){re.escape(str(w.id))}(?![A-Za-z0-9_])")
        expected = str((getattr(w, "signals", None) or {}).get("expected") or "")
        for line in expected.splitlines():
            if len(line.strip()) >= EXPECTED_MIN_CHARS:
                add(EXPECTED_LABEL, re.escape(line.strip()))
    return out


def added_content(diff: str) -> list[str]:
    """The precheck input: each ``+`` line without its marker and each ``+++`` path without ``b/``."""
    out: list[str] = []
    for line in diff.splitlines():
        if line.startswith("+++"):
            path = line[3:].strip()
            out.append(path[2:] if path.startswith("b/") else path)
        elif line.startswith("+"):
            out.append(line[1:])
    return out


def _decoded(line: str) -> list[str]:
    texts: list[str] = []
    for m in _JSON_STRING.finditer(line):
        if "\\" not in m.group(1):
            continue
        try:
            texts.append(json.loads(f'"{m.group(1)}"'))
        except ValueError:
            continue
    return texts


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1] + "…"


def precheck(diff: str, patterns: Sequence[Pattern] = ()) -> list[str]:
    """Stage 1: the rejection reasons of the deterministic precheck; ``[]`` = passed.

    Reasons are in pattern order (credentials, production, then ``patterns``), one per distinct
    ``(label, snippet)``. Credential reasons never show the matched text.
    """
    if not diff.strip():
        return ["empty diff"]
    lines = added_content(diff)
    text = "\n".join(lines + [t for line in lines for t in _decoded(line)])
    reasons = [f"precheck: {label}" for label in find_credentials(text)]
    for label, rx in (*PRODUCTION_PATTERNS, *patterns):
        for m in rx.finditer(text):
            reason = f"precheck: {label}"
            if label in SNIPPET_LABELS:
                reason += f": '{_snippet(m.group(0))}'"
            if reason not in reasons:
                reasons.append(reason)
            if label not in SNIPPET_LABELS:
                break
    return reasons
