"""The arithmetic of ``rsi bench efficacy``: held-out pass rates, no-op diffs, false and harmful
adoptions, tokens per adoption (docs/benchmarks/efficacy.md, "Metrics").

Pure functions of recorded histories, so they are unit-tested on synthetic ones.

**No-op.** A harness's *effective prompt surface* is the system prompt the policy model receives on
a probe turn, the tool definitions it is offered, and the text of every harness file (skills).
The surface is cut into units — lines, and sentences within lines — each normalised (Unicode NFKC,
case-folded, whitespace collapsed, a leading list marker or ``#`` dropped). An adopted harness is a
**no-op** relative to its parent when none of its units is absent from the parent's surface (it adds
nothing new) and its normalised surface is not shorter than the parent's. So a duplicated block, a
re-ordered copy of identical text and a change of params alone are no-ops; a strictly shorter
surface that adds nothing is a simplification, not a no-op (if it dropped a learned habit, the
harm check below catches it).

**Harmful.** Held-out turns run with fixed clocks and messages that do not depend on the harness,
so the sim model's noise draws are the same under every harness (common random numbers): a trait
the parent passed on a held-out turn and the child fails there was lost by the adoption, not by
noise. An adoption is harmful when it loses, on at least one held-out turn, a preference the parent
had learned (passed on at least one held-out turn).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "H0",
    "AdoptionRecord",
    "AgentHistory",
    "Verdict",
    "classify",
    "harm",
    "is_noop",
    "level_summary",
    "pass_rate",
    "surface_units",
    "tokens_per_adoption",
    "turn_passes",
    "usage_tokens",
]

H0 = "H0"
"""Version key of the agent's initial harness (``current_version`` ``None``)."""

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_MARKER = re.compile(r"^(?:[-*•]\s+|\d+[.)]\s+|#+\s*)")
_SPACE = re.compile(r"\s+")


def surface_units(surface: str) -> list[str]:
    """The normalised units of an effective prompt surface, in order (module docstring)."""
    units: list[str] = []
    for line in unicodedata.normalize("NFKC", surface).casefold().splitlines():
        line = _MARKER.sub("", _SPACE.sub(" ", line).strip())
        units += [part.strip() for part in _SENTENCE.split(line) if part.strip()]
    return units


def is_noop(parent_surface: str, child_surface: str) -> bool:
    """Whether the child's surface adds no unit to the parent's and is not shorter (module docstring)."""
    parent, child = surface_units(parent_surface), surface_units(child_surface)
    return set(child) <= set(parent) and sum(map(len, child)) >= sum(map(len, parent))


def pass_rate(passes: Sequence[bool]) -> float | None:
    """Share of ``True`` in ``passes``; ``None`` when empty."""
    return sum(passes) / len(passes) if passes else None


def turn_passes(by_trait: Mapping[str, Sequence[bool]], traits: Sequence[str]) -> list[bool]:
    """Per held-out turn: every trait of ``traits`` passed (``by_trait[t][i]``)."""
    if not traits:
        return []
    n = min(len(by_trait[t]) for t in traits)
    return [all(by_trait[t][i] for t in traits) for i in range(n)]


@dataclass(frozen=True)
class AdoptionRecord:
    """One adoption of an agent: run, parent and child version keys, the no-op test of its diff."""

    run_id: str
    parent: str
    child: str
    noop: bool


@dataclass(frozen=True)
class AgentHistory:
    """What the bench recorded of one agent (its adoptions in order and its held-out results)."""

    agent: str
    kind: str
    traits: tuple[str, ...]
    """Every preference the user holds by the end (empty for an acceptance control)."""
    adoptions: tuple[AdoptionRecord, ...]
    heldout: Mapping[str, Mapping[str, Sequence[bool]]]
    """Version key → trait → pass per held-out turn (every version the agent adopted, and H0)."""
    final: str
    """Version key of the agent's harness at the end."""
    answers: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Version key → the held-out answers (to tell adoptions that changed no held-out answer)."""

    @property
    def learning(self) -> bool:
        return bool(self.traits)


@dataclass(frozen=True)
class Verdict:
    """The classification of one adoption; a reason is ``None`` when it does not apply."""

    agent: str
    index: int
    """1 for the agent's first adoption, 2 for its second, …"""
    run_id: str
    false: str | None
    harmful: str | None
    unchanged: bool
    """The adoption changed none of the agent's held-out answers."""


def harm(parent: Mapping[str, Sequence[bool]], child: Mapping[str, Sequence[bool]],
         traits: Sequence[str]) -> str | None:
    """Why an adoption from ``parent`` to ``child`` is harmful, or ``None`` (module docstring)."""
    lost: list[str] = []
    for t in traits:
        before, after = parent.get(t, ()), child.get(t, ())
        if not any(before):
            continue
        turns = sum(1 for b, a in zip(before, after, strict=False) if b and not a)
        if turns:
            lost.append(f"{t} on {turns} of {len(before)} held-out turns")
    return "lost " + ", ".join(lost) if lost else None


def classify(history: AgentHistory) -> list[Verdict]:
    """Classify each adoption of ``history`` (docs/benchmarks/efficacy.md, "False and harmful").

    False: any adoption on an acceptance control; in a repeated-correction control any adoption
    after its first; any adoption whose diff is a no-op. Harmful: :func:`harm`.
    """
    out: list[Verdict] = []
    for i, a in enumerate(history.adoptions):
        reasons: list[str] = []
        if history.kind == "accept":
            reasons.append("adoption on an acceptance control")
        if history.kind == "repeat" and i > 0:
            reasons.append("adoption after the first learning of a repeated correction")
        if a.noop:
            reasons.append("no-op diff: the harness adds nothing to its parent's prompt surface")
        harmful = harm(history.heldout.get(a.parent, {}), history.heldout.get(a.child, {}), history.traits)
        before, after = history.answers.get(a.parent), history.answers.get(a.child)
        unchanged = before is not None and after is not None and list(before) == list(after)
        out.append(Verdict(history.agent, i + 1, a.run_id, "; ".join(reasons) or None, harmful, unchanged))
    return out


def usage_tokens(usage: Mapping[str, Any] | None) -> int:
    """Input plus output tokens of a run record's per-role usage ``{role: {input_tokens, output_tokens}}``.

    A ``policy`` entry, if a run record ever carries one, is left out: replay tokens are counted from
    the replay rows.
    """
    total = 0
    for role, u in (usage or {}).items():
        if role == "policy" or not isinstance(u, Mapping):
            continue
        total += int(u.get("input_tokens") or 0) + int(u.get("output_tokens") or 0)
    return total


def tokens_per_adoption(role_tokens: int, replay_tokens: int, adoptions: int) -> float | None:
    """All consolidation tokens of the pool per adoption; ``None`` without an adoption."""
    return round((role_tokens + replay_tokens) / adoptions, 1) if adoptions else None


def _rate(values: Iterable[bool]) -> float | None:
    got = list(values)
    rate = pass_rate(got)
    return None if rate is None else round(rate, 4)


def level_summary(histories: Sequence[AgentHistory], runs: Mapping[str, Any]) -> dict[str, Any]:
    """The report of one noise level.

    Args:
        histories: every agent of the pool at this level.
        runs: ``{runs, rounds, statuses, role_tokens, replay_tokens}`` read from the run records.

    Returns:
        The six required keys ``heldout_h0, heldout_final, adoptions, false_adoptions,
        harmful_adoptions, tokens_per_adoption``, then counts and diagnostics.
    """
    learners = [h for h in histories if h.learning]
    h0 = [p for h in learners for p in turn_passes(h.heldout[H0], h.traits)]
    final = [p for h in learners for p in turn_passes(h.heldout[h.final], h.traits)]
    verdicts = [v for h in histories for v in classify(h)]
    adoptions = len(verdicts)
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in sorted({h.kind for h in histories}):
        mine = [h for h in histories if h.kind == kind]
        by_kind[kind] = {
            "agents": len(mine),
            "adoptions": sum(len(h.adoptions) for h in mine),
            "heldout_h0": _rate(p for h in mine if h.learning for p in turn_passes(h.heldout[H0], h.traits)),
            "heldout_final": _rate(p for h in mine if h.learning
                                   for p in turn_passes(h.heldout[h.final], h.traits)),
        }
    rh0, rfinal = _rate(h0), _rate(final)
    return {
        "heldout_h0": rh0,
        "heldout_final": rfinal,
        "adoptions": adoptions,
        "false_adoptions": sum(1 for v in verdicts if v.false),
        "harmful_adoptions": sum(1 for v in verdicts if v.harmful),
        "tokens_per_adoption": tokens_per_adoption(int(runs["role_tokens"]), int(runs["replay_tokens"]),
                                                   adoptions),
        "heldout_gain": None if rh0 is None or rfinal is None else round(rfinal - rh0, 4),
        "noop_adoptions": sum(1 for h in histories for a in h.adoptions if a.noop),
        "unchanged_heldout_adoptions": sum(1 for v in verdicts if v.unchanged),
        "agents": len(histories),
        "learning_agents": len(learners),
        "heldout_turns": len(final),
        "runs": int(runs["runs"]),
        "rounds": int(runs["rounds"]),
        "statuses": dict(runs["statuses"]),
        "role_tokens": int(runs["role_tokens"]),
        "replay_tokens": int(runs["replay_tokens"]),
        "by_kind": by_kind,
        "false": [f"{v.agent} adoption {v.index}: {v.false}" for v in verdicts if v.false],
        "harmful": [f"{v.agent} adoption {v.index}: {v.harmful}" for v in verdicts if v.harmful],
    }
