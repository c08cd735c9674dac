"""The gate's deterministic screen: every check a candidate must pass before the model critic sees it
(docs/security/gate.md). It holds even when a critic model would say "accept": a rejection here
ends the attempt without a model call.

In order (the first failing stage names the rejection; its reasons are all reported):

1. ``manifest`` — the candidate loads, and its touch set has no violation: no locked address changed
   (params, files, toggles, components, order, name — one function,
   :func:`rsi_common.harness.touched`), no platform field changed, no listed file missing.
2. ``surface`` — not a no-op, no duplicated instruction, within the growth budget
   (:mod:`~rsi_worker.gate.surface`); a no-op ends the screen at once.
3. ``privilege`` — :func:`~rsi_worker.gate.privileges.privilege_violations`, the runtime's PV1
   (:func:`~rsi_worker.gate.grants.granted_tools_violations`) and PV3/PV4
   (:func:`~rsi_worker.gate.exploits.exploit_reasons`). PV2 (a component whose ``<id>.enabled`` is
   locked disabled or removed, :func:`~rsi_worker.gate.grants.locked_disable_violations`) is read
   from the raw manifest before stage 1, so it names the rejection even when the candidate would
   not load.
4. ``precheck`` — the pattern precheck over the diff's added lines (credentials, platform setting
   names, evaluation artefacts, recorded world ids, expected-answer lines; :mod:`~rsi_worker.gate.precheck`).
5. ``untrusted`` — over the added texts (:func:`~rsi_worker.gate.added.added_texts`): instruction
   overrides (:mod:`~rsi_worker.gate.overrides`), spans shared with untrusted text and identifiers
   taken from it (:mod:`~rsi_worker.gate.untrusted`).

Stages 2–5 all run, so one reply tells the proposer everything to repair. Reasons quote the offending
added text (so a repair can find it) except identifiers, which are masked (a customer's number must
not spread to run records).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rsi_common.errors import ManifestError
from rsi_common.harness import Harness, diff_trees, harness_from_workspace, touched, workspace_of
from rsi_worker.gate.added import Added, added_texts
from rsi_worker.gate.exploits import exploit_reasons
from rsi_worker.gate.grants import granted_tools_violations, locked_disable_violations
from rsi_worker.gate.overrides import override_forms
from rsi_worker.gate.precheck import Pattern, precheck
from rsi_worker.gate.privileges import privilege_violations
from rsi_worker.gate.surface import surface_reasons
from rsi_worker.gate.untrusted import UntrustedIndex

__all__ = ["SNIPPET_CHARS", "GateRound", "Screened", "mask", "screen"]

SNIPPET_CHARS = 120


@dataclass(frozen=True)
class Screened:
    """A rejection by the screen: ``stage`` is ``manifest``, ``surface``, ``privilege``, ``precheck`` or
    ``untrusted``."""

    stage: str
    reasons: list[str]


@dataclass
class GateRound:
    """What the screen needs from one round.

    Attributes:
        incumbent: the current harness (touch sets and added text are against it).
        untrusted: the round's untrusted text (:class:`UntrustedIndex`).
        patterns: the per-round precheck patterns (:func:`~rsi_worker.gate.precheck.critic_patterns`).
        ceilings: ``"<kind>.<param>"`` → ceiling (``ConsolidationParams.ceilings``).
        max_instruction_chars: the growth budget (``ConsolidationParams.max_instruction_chars``).
    """

    incumbent: Harness
    untrusted: UntrustedIndex
    patterns: Sequence[Pattern] = ()
    ceilings: Mapping[str, float] = field(default_factory=dict)
    max_instruction_chars: int = 4000
    forbidden_terms: Sequence[str] = ()
    """The agent's toolset's ``forbidden_terms`` (PV3, docs/runtime/refine.md#privilege-screen)."""
    revoked_lines: Sequence[str] = ()
    """Lines added by revoked versions of the agent (PV4)."""
    revoked_versions: Sequence[str] = ()
    """Revoked versions of the agent: a candidate equal to one is PV4."""
    granted_tools: Sequence[str] | None = None
    """The agent's tool grant (PV1); ``None``: only the incumbent's ``tools`` lists are allowed."""


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1] + "…"


def mask(token: str) -> str:
    """An identifier shown without its value: first character, ``…`` and its length."""
    kind = "digits" if token.isdigit() else "chars"
    return f"{token[:1]}… ({len(token)} {kind})"


def _untrusted(rnd: GateRound, texts: list[Added]) -> Iterable[str]:
    for added in texts:
        where = added.address
        for label, text in override_forms(added.text):
            yield f"instruction override ({label}) at {where}: '{_snippet(text)}'"
        span = rnd.untrusted.shared_span(added.text)
        if span is not None:
            yield (
                f"user text at {where}: the added text repeats {span.tokens} words a user or tool wrote: "
                f"'{_snippet(span.text)}'"
            )
        ids = rnd.untrusted.identifiers_in(added.text)
        if ids:
            yield (
                f"identifier from user text at {where}: {', '.join(mask(i) for i in ids)} "
                "(names, numbers, e-mail addresses and links from conversations never enter a harness)"
            )


def screen(rnd: GateRound, ws: Mapping[str, str]) -> Screened | None:
    """Screen the candidate workspace ``ws``; ``None`` = every deterministic check passed."""
    locked_off = locked_disable_violations(rnd.incumbent, ws)
    if locked_off:
        return Screened("privilege", locked_off)
    try:
        ts = touched(rnd.incumbent, ws)
        cand = harness_from_workspace(ws)
    except ManifestError as exc:
        return Screened("manifest", [f"manifest error: {exc}"])
    if ts.violations:
        return Screened("manifest", [f"manifest error: {'; '.join(ts.violations)}"])
    added = added_texts(rnd.incumbent, cand)
    found = surface_reasons(rnd.incumbent, cand, added, rnd.max_instruction_chars)
    if found and found[0].startswith("no-op"):
        return Screened("surface", found)
    stages = (
        ("surface", found),
        ("privilege", privilege_violations(rnd.incumbent, cand, rnd.ceilings)
         + granted_tools_violations(rnd.incumbent, ws, rnd.granted_tools)
         + exploit_reasons(added, rnd.forbidden_terms, rnd.revoked_lines)
         + ([f"privilege: PV4 the candidate is the revoked version {cand.version}"]
            if cand.version in rnd.revoked_versions else [])),
        ("precheck", precheck(diff_trees(workspace_of(rnd.incumbent), ws), rnd.patterns)),
        ("untrusted", list(dict.fromkeys(_untrusted(rnd, added)))),
    )
    failed = [(stage, reasons) for stage, reasons in stages if reasons]
    if not failed:
        return None
    return Screened(failed[0][0], [r for _, reasons in failed for r in reasons])
