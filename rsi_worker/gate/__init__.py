"""The gate a candidate harness passes before it is replayed (docs/security/gate.md).

* :mod:`~rsi_worker.gate.screen` — the deterministic screen (manifest and locks, privileges, the
  pattern precheck, untrusted text), run before and independent of the model critic
  (``rsi_worker.roles.critic``);
* :mod:`~rsi_worker.gate.precheck` — the critic's first stage (docs/formats.md §6.2): fixed patterns over the
  added text;
* :mod:`~rsi_worker.gate.untrusted` — what counts as untrusted text, shared spans, identifiers;
* :mod:`~rsi_worker.gate.overrides` — instruction-override forms;
* :mod:`~rsi_worker.gate.surface` — the effective surface: no-op, duplicate, growth budget;
* :mod:`~rsi_worker.gate.privileges` — tool exposure, safety switches, locked components, ceilings;
* :mod:`~rsi_worker.gate.added` — the text a candidate adds;
* :mod:`~rsi_worker.gate.text` — normalisation (case, spacing, punctuation, invisible and look-alike
  characters).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rsi_common.harness import Harness, workspace_of
from rsi_common.world import TurnWorld
from rsi_worker.gate.precheck import Pattern, critic_patterns, precheck
from rsi_worker.gate.screen import GateRound, Screened, screen
from rsi_worker.gate.untrusted import UntrustedIndex, untrusted_texts

__all__ = [
    "GateRound",
    "Pattern",
    "Screened",
    "UntrustedIndex",
    "build_round",
    "critic_patterns",
    "precheck",
    "screen",
    "untrusted_texts",
]


def _report_texts(analysis: Mapping[str, Any]) -> Iterable[str]:
    for key, name in (("failure_modes", "mode"), ("success_habits", "habit")):
        for item in analysis.get(key) or ():
            if isinstance(item, Mapping):
                yield str(item.get(name) or "")
                yield str(item.get("description") or "")


def build_round(
    incumbent: Harness,
    worlds: Sequence[TurnWorld],
    *,
    views: Sequence[Any] = (),
    analysis: Mapping[str, Any] | None = None,
    patterns: Sequence[Pattern] = (),
    ceilings: Mapping[str, float] | None = None,
    trusted: Iterable[str] = (),
    max_instruction_chars: int = 4000,
    screen: Any = None,
) -> GateRound:
    """The :class:`GateRound` of one round.

    Args:
        incumbent: the current harness.
        worlds: the loaded worlds (their text is untrusted).
        views: the evaluation views (trial answers, judge reasons: untrusted).
        analysis: the analyst's report; its mode and habit names and descriptions are trusted
            vocabulary (what the analyst generalised).
        patterns: the per-round precheck patterns (:func:`~rsi_worker.gate.precheck.critic_patterns`).
        ceilings: the configured ceilings (``ConsolidationParams.ceilings``).
        trusted: more trusted text (e.g. the constitution).
        max_instruction_chars: the growth budget.
        screen: the agent's privilege inputs (``granted_tools``, ``forbidden_terms``,
            ``revoked_lines``, ``revoked_versions`` attributes; docs/runtime/refine.md#privilege-screen).
    """
    vocabulary = [*workspace_of(incumbent).values(), *_report_texts(analysis or {}), *trusted]
    index = UntrustedIndex(untrusted_texts(worlds, views), trusted=vocabulary)
    if screen is None:
        return GateRound(incumbent, index, patterns, dict(ceilings or {}), max_instruction_chars)
    return GateRound(incumbent, index, patterns, dict(ceilings or {}), max_instruction_chars,
                     forbidden_terms=tuple(screen.forbidden_terms), revoked_lines=tuple(screen.revoked_lines),
                     revoked_versions=tuple(screen.revoked_versions), granted_tools=screen.granted_tools)
