"""Component-tag normalisation from diffs (docs/algorithm/formulas.md §2.7).

A declared tag is kept only with evidence; otherwise the change is reclassified. Re-tagging never
rejects a candidate. ``signals`` arguments are *domain signals*: an ordered mapping kind → regexes,
consulted before :data:`GENERIC_SIGNALS`. An invalid regex raises
:class:`~rsi_common.errors.InvalidInput` (project decision: not ``re.error``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from rsi_common.errors import InvalidInput
from rsi_common.kinds import KINDS

__all__ = ["GENERIC_SIGNALS", "Signals", "classify_diff", "has_evidence", "normalize_component", "text_only"]

Signals = Mapping[str, Sequence[str]]
"""kind → regexes, in consultation order."""

GENERIC_SIGNALS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "memory": (r"\bMemory\(", r"\.remember\(", r"\.recall\(", r"_STATE_DIR"),
    "skill": (r"skills/", r"SkillRegistry", r"skill_use", r"skill_catalog", r"upload_skills"),
    "client_tool": (r"ToolRegistry", r"register_tool", r"tool_spec", r"CLIENT_TOOLS"),
    "subagent": (r"\bsubcall\(", r"sub_agent", r"subagent"),
})
"""Generic structural signals, consulted after any domain signals, in this order."""

_LITERAL = re.compile(r"[frbFRB]?[\"']")


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error as exc:
        raise InvalidInput(f"invalid signal regex {pattern!r}: {exc}") from exc


def _changed_lines(diff: str) -> list[str]:
    """The remainders of changed lines (``+``/``-`` but not ``+++``/``---``) that are not blank.

    Lines are split on ``"\\n"`` only (diffs are joined with ``"\\n"``, docs/algorithm/consolidation.md §3.9).
    """
    out = []
    for line in diff.split("\n"):
        if line.startswith(("+++", "---")) or not line.startswith(("+", "-")):
            continue
        rest = line[1:]
        if rest.strip():
            out.append(rest)
    return out


def text_only(diff: str) -> bool:
    """True iff the diff changes only comments and string literals (and changes something).

    Every changed line, after its marker and optional whitespace, starts with ``#`` or matches
    ``[frbFRB]?["']``. No changed line → False.
    """
    lines = _changed_lines(diff)
    if not lines:
        return False
    for rest in lines:
        body = rest.lstrip()
        if not (body.startswith("#") or _LITERAL.match(body)):
            return False
    return True


def _ordered_kinds(signals: Signals) -> list[tuple[str, Sequence[str]]]:
    return [*signals.items(), *GENERIC_SIGNALS.items()]


def classify_diff(diff: str, signals: Signals | None = None) -> str:
    """``prompt`` if :func:`text_only`; else the first kind (domain signals, then generic) with a
    regex found in the diff; default ``prompt``."""
    if text_only(diff):
        return "prompt"
    for kind, patterns in _ordered_kinds(signals or {}):
        if any(_search(p, diff) for p in patterns):
            return kind
    return "prompt"


def has_evidence(kind: str, diff: str, signals: Signals | None = None) -> bool:
    """Some regex of ``signals[kind]`` or ``GENERIC_SIGNALS[kind]`` is found in the diff."""
    patterns = [*(signals or {}).get(kind, ()), *GENERIC_SIGNALS.get(kind, ())]
    return any(_search(p, diff) for p in patterns)


def normalize_component(declared: str | None, touched_kinds: Iterable[str], diff: str,
                        signals: Signals | None = None) -> str:
    """The kind an edit is recorded under.

    ``d = (declared or "").strip().lower()``; ``kinds`` = touched kinds in 𝒦.

    1. ``d ∈ 𝒦`` and ``d ∈ kinds`` → d;
    2. ``d ∈ 𝒦`` and :func:`has_evidence` (d) → d;
    3. :func:`text_only` → ``prompt``;
    4. exactly one distinct kind in ``kinds`` → it;
    5. :func:`classify_diff`.

    With empty ``touched_kinds`` this is RRSI's plain diff-based normalisation.
    """
    d = (declared or "").strip().lower()
    kinds = {k for k in touched_kinds if k in KINDS}
    if d in KINDS and d in kinds:
        return d
    if d in KINDS and has_evidence(d, diff, signals):
        return d
    if text_only(diff):
        return "prompt"
    if len(kinds) == 1:
        return next(iter(kinds))
    return classify_diff(diff, signals)
