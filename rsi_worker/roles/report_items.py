"""What a role's report keeps of a model's reply (docs/algorithm/consolidation.md §3.8, evolve.md
"Hostile input"): the analyst's and the reporter's lists of failure modes, gaps and habits.

The reply is hostile: a number where a list belongs, a NaN, a lone surrogate or a 5 MB item must
neither crash the round nor reach a stored row (PostgreSQL refuses NaN and lone surrogates in JSON)
nor bloat every round's record. :func:`kept_items` keeps what is storable and bounded and drops the
rest; :func:`kept_notes` does the same for a free-text note.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rsi_common.stored import first_problem, safe_text

__all__ = [
    "NOTES_CHARS",
    "REPORT_ITEMS",
    "REPORT_ITEM_CHARS",
    "TEXT_CHARS",
    "fits",
    "kept_items",
    "kept_notes",
    "kept_texts",
    "reply_text",
]

REPORT_ITEMS = 20
"""Items kept per list of a report (failure modes, capability gaps, success habits)."""
REPORT_ITEM_CHARS = 4_000
"""An item of a report, at most, as JSON (a longer one is dropped)."""
NOTES_CHARS = 2_000
"""A report's free-text notes, at most (clipped)."""
TEXT_CHARS = 1_000
"""One text of a reply's list of texts (the critic's reasons and risk notes), at most (clipped)."""


def fits(value: object, chars: int) -> bool:
    """Whether ``value`` can be stored (finite numbers, no lone surrogate, at most 64 levels) and is at
    most ``chars`` characters as JSON."""
    return first_problem(value) is None and len(json.dumps(value, ensure_ascii=False)) <= chars


def kept_items(out: object, key: str, field: str) -> list[dict[str, Any]]:
    """The reply's ``key`` list as a round stores it: objects naming ``field``, each storable (finite
    numbers, no lone surrogate, at most 64 levels) and at most :data:`REPORT_ITEM_CHARS` as JSON, the
    first :data:`REPORT_ITEMS`; anything else is dropped."""
    raw = out.get(key) if isinstance(out, Mapping) else None
    kept: list[dict[str, Any]] = []
    for item in raw if isinstance(raw, list) else []:
        if not (isinstance(item, Mapping) and item.get(field) and fits(dict(item), REPORT_ITEM_CHARS)):
            continue
        kept.append(dict(item))
        if len(kept) == REPORT_ITEMS:
            break
    return kept


def kept_notes(out: object) -> str:
    """The reply's ``notes`` as text, clipped to :data:`NOTES_CHARS`; empty when missing or not
    storable."""
    notes = out.get("notes") if isinstance(out, Mapping) else None
    if notes is None or isinstance(notes, (Mapping, list)):
        return ""
    text = str(notes)[:NOTES_CHARS]
    return "" if first_problem(text) is not None else text


def kept_texts(value: object, limit: int = TEXT_CHARS) -> list[str]:
    """A reply's list of texts as a round stores it: a string is a list of one, a list keeps its
    non-blank items as text (numbers and objects through ``str``), anything else is one text; at
    most :data:`REPORT_ITEMS` texts, each through :func:`~rsi_common.stored.safe_text` (lone
    surrogates replaced, credential-shaped text withheld, clipped to ``limit`` characters)."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    kept: list[str] = []
    for item in items:
        if isinstance(item, dict | list) and first_problem(item) is not None:
            continue  # too deep to print, or holds what str() would carry along
        text = item if isinstance(item, str) else str(item)
        if text.strip():
            kept.append(safe_text(text, limit))
            if len(kept) == REPORT_ITEMS:
                break
    return kept


def reply_text(value: object) -> str:
    """A reply's text field as text: a string, or a number written out; ``""`` for anything else (an
    object or a list is no text, and printing a deeply nested one may raise)."""
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int | float) else ""
