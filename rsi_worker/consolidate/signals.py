"""User signals → criteria (docs/algorithm/consolidation.md §3.4).

A world's signal dict: ``{"expected": str, "stars": int 1..5 | None, "issue": str, "comment": str,
"criteria": [str], "implicit": {"kind", "criterion", "evidence", "error"?}}``. Explicit fields come
from the host (``client.record_signals``); ``implicit`` is read by a consolidation from the next
message of the same conversation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "KEEPS_ACCEPTED",
    "NO_ISSUE",
    "REPORTED",
    "SAME_AS_REFERENCE",
    "checks_for",
    "negative",
    "unread_pairs",
]

NO_ISSUE = ("", "none", "no issue")
"""Issue texts that mean "no issue", compared after ``strip().lower()`` (project decision)."""

SAME_AS_REFERENCE = (
    "The answer states the same facts, numbers and conclusions as the reference answer; "
    "wording and order may differ."
)
KEEPS_ACCEPTED = "The answer keeps every key point of the reference answer, which the user accepted."
REPORTED = (
    "The answer does not have the problem the user reported on an earlier answer to this request ({problem})."
)
FIX_KINDS = ("correction", "complaint")


class WorldLike(Protocol):
    """What pairing needs of a world (``rsi_common.world.TurnWorld`` satisfies it)."""

    @property
    def id(self) -> str: ...
    @property
    def signals(self) -> dict[str, Any]: ...
    @property
    def interaction_id(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def clock(self) -> float: ...
    @property
    def request(self) -> str: ...
    @property
    def answer(self) -> str: ...


def _text(value: Any) -> str:
    return str(value or "").strip()


def _stars(signals: Mapping[str, Any]) -> int | None:
    value = signals.get("stars")
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _real_issue(signals: Mapping[str, Any]) -> bool:
    return _text(signals.get("issue")).lower() not in NO_ISSUE


def _implicit(signals: Mapping[str, Any]) -> Mapping[str, Any]:
    imp = signals.get("implicit")
    return imp if isinstance(imp, Mapping) else {}


def checks_for(signals: Mapping[str, Any] | None, answer: str = "") -> list[dict[str, Any]]:
    """The checks a world's signals define, in docs/algorithm/consolidation.md §3.4 order.

    Returns:
        ``[{"kind": "answer_criteria", "name", "criterion", "reference"?}, ...]``.
    """
    s = signals or {}
    checks: list[dict[str, Any]] = []

    def add(name: str, criterion: str, reference: str | None = None) -> None:
        check: dict[str, Any] = {"kind": "answer_criteria", "name": name, "criterion": criterion}
        if reference is not None:
            check["reference"] = reference
        checks.append(check)

    expected = _text(s.get("expected"))
    if expected:
        add("expected", SAME_AS_REFERENCE, expected)
    stars = _stars(s)
    if _real_issue(s) or (stars is not None and stars <= 2):
        problem = _text(s.get("issue")) if _real_issue(s) else "the user rated this answer as poor"
        comment = _text(s.get("comment"))
        if comment:
            problem = f"{problem}: {comment}"
        add("reported_problem", REPORTED.format(problem=problem))
    elif stars is not None and stars >= 4 and answer.strip():
        add("accepted", KEEPS_ACCEPTED, answer)
    for i, criterion in enumerate((c for c in s.get("criteria") or [] if _text(c)), start=1):
        add(f"user_{i}", str(criterion).strip())
    imp = _implicit(s)
    kind = imp.get("kind")
    if kind in FIX_KINDS and _text(imp.get("criterion")):
        add(f"implicit_{kind}", _text(imp.get("criterion")))
    elif kind == "accept" and answer.strip() and not any(c["name"] == "accepted" for c in checks):
        add("implicit_accept", KEEPS_ACCEPTED, answer)
    return checks


def negative(signals: Mapping[str, Any] | None) -> bool:
    """True when the signals ask for a fix (docs/algorithm/consolidation.md §3.4)."""
    s = signals or {}
    stars = _stars(s)
    return bool(
        _implicit(s).get("kind") in FIX_KINDS
        or _text(s.get("expected"))
        or any(_text(c) for c in s.get("criteria") or [])
        or (stars is not None and stars <= 2)
        or _real_issue(s)
    )


def unread_pairs(worlds: Sequence[WorldLike], latest: str, limit: int) -> list[tuple[WorldLike, WorldLike]]:
    """Pairs ``(prev, cur)`` whose implicit signal is still unread (docs/algorithm/consolidation.md §3.4
    "Unread pairs").

    ``prev`` is the world of the same non-empty conversation with the largest ``seq < cur.seq``;
    a pair is kept when ``"implicit"`` is not yet in ``prev.signals``, ``prev.answer`` is non-blank
    and ``cur.request`` is non-empty. Sorted with the triggering turn first, then most recent first;
    at most ``limit`` pairs.
    """
    by_conv: dict[str, list[WorldLike]] = {}
    for w in worlds:
        if w.interaction_id:
            by_conv.setdefault(w.interaction_id, []).append(w)
    pairs: list[tuple[WorldLike, WorldLike]] = []
    for cur in worlds:
        if not cur.interaction_id:
            continue
        group = by_conv[cur.interaction_id]
        if len(group) < 2:  # most worlds: a conversation of one turn (no pair)
            continue
        earlier = [w for w in group if w.seq < cur.seq]
        if not earlier:
            continue
        prev = max(earlier, key=lambda w: w.seq)
        if "implicit" in prev.signals or not prev.answer.strip() or not cur.request:
            continue
        pairs.append((prev, cur))
    pairs.sort(key=lambda p: (p[1].id != latest, -p[1].clock, -p[1].seq))
    return pairs[: max(0, limit)]
