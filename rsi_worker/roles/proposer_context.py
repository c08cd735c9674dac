"""The proposer's context (docs/formats.md §6.1 "Context", docs/algorithm/consolidation.md §3.9 step 2, §6.4
``render``): the round-specific text.

The system prompt is the cacheable prefix — the constitution (``constitution/SKILL.md``) and the
pattern library (``constitution/PATTERNS.md``) — followed by the proposer brief
(docs/algorithm/consolidation.md §3.10) and the
action protocol; it is the same for every round, so it can be cached (``cache_points=["system"]``).

The first user message holds the round, as ``HEADER:`` sections in this order (a model, the sim
included, reads them by their headers; see :data:`SECTIONS`):

``VARIANT`` (variant brief) · ``EDIT HISTORY`` (docs/formats.md §6.4 render, last 40 rows, at most the 4
latest
unmeasured; early-stopped rows marked "ΔS is an upper bound") · ``SCOREBOARD`` (last 20 rows) ·
``EXPLORATION`` (enabled and untried kinds, the directive, the reserved-slot sentence) · ``PRUNE SET``
(with the accepted edits of each kind) · ``ANALYSIS REPORT`` · ``TASK ROWS`` · ``CURRENT MANIFEST``
(the incumbent's) · ``EDITABLE ADDRESSES`` · ``BUDGET`` ("make AT MOST {b_t} independent edit(s)") ·
``SELECTION RULES`` (this round's numbers) · then ``TASK`` — or, in repair mode, ``REPAIR`` with the
JSON object ``{reasons, risk_notes, your_declared_edits}``.

Decisions: "round t" of the variant brief is the consolidation round index ``t``; rows are rendered
as one JSON object per line; the selection text lists the structural kinds that would earn novelty
now (enabled, in 𝒦_str, no accepted edit in the history).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import Any, Protocol

from rsi_common.config import ConsolidationParams
from rsi_common.harness import Harness, editable_addresses
from rsi_common.kinds import K_STR
from rsi_common.math import Exploration, PruneTarget, exploration_directive
from rsi_worker.gate.surface import instruction_chars, surface
from rsi_worker.roles.analyst import View, task_row

__all__ = [
    "CONSTITUTION_DIR",
    "CONSTITUTION_ID",
    "PROPOSER_BRIEF",
    "PROTOCOL_TEXT",
    "SECTIONS",
    "RoundInfo",
    "budget_sentence",
    "cacheable_prefix",
    "exploration_text",
    "proposer_system",
    "proposer_user",
    "render_analysis",
    "render_history",
    "render_prune",
    "render_scoreboard",
    "reserved_sentence",
    "selection_text",
    "variant_brief",
]

CONSTITUTION_DIR = Path(__file__).parent / "constitution"
CONSTITUTION_ID = "rsi-turn-consolidation-v1"
SECTIONS = (
    "VARIANT", "EDIT HISTORY", "SCOREBOARD", "EXPLORATION", "PRUNE SET", "ANALYSIS REPORT", "TASK ROWS",
    "CURRENT MANIFEST", "EDITABLE ADDRESSES", "BUDGET", "SELECTION RULES", "TASK", "REPAIR",
)
"""Headers of the first user message, in order (``TASK`` and ``REPAIR`` are alternatives)."""
HISTORY_ROWS, HISTORY_UNMEASURED, SCOREBOARD_ROWS = 40, 4, 20
HISTORY_KEYS = ("t", "variant", "edit_id", "component", "hypothesis", "targets_mode", "delta_S", "delta_C",
                "accepted", "outcome", "bundle", "detail", "early_stopped", "delta_C_partial")
UPPER_BOUND_NOTE = "ΔS is an upper bound"

PROPOSER_BRIEF = (
    "ROLE\nYou improve the harness of one production agent. The worlds are this agent's past turns, "
    "replayed: the harness rebuilds each turn, the same frozen model answers again and every tool call "
    "returns its recorded result; a call that was not recorded gets a \"no recorded result\" error. "
    "Criteria come from the users' own signals, including what their next message said about an answer. "
    "Serve the recurring needs behind the failures; never encode conversation content (facts, numbers, "
    "answers, names, quotes, file names, triggers for one request). The kernel, the agent's own "
    "instructions and the judge are out of reach."
)
PROTOCOL_TEXT = """PROTOCOL
Reply with exactly one JSON object per message, {"action": <name>, ...}, and nothing else.
- {"action": "list_files"}: the paths of the workspace.
- {"action": "read_file", "path": P}: the text of a file.
- {"action": "list_components"}: the registered implementations: kind, params with defaults and docs, \
params set in this harness, components using each.
- {"action": "list_traces"}: one row per world: id | score | failed criteria | request preview.
- {"action": "read_trace", "task_id": ID, "from_step": N, "to_step": N, "detail": true}: one world \
(step range and detail optional).
- {"action": "edit_file", "path": P, "old": TEXT, "new": TEXT}: replace old, which must occur exactly \
once.
- {"action": "write_file", "path": P, "content": TEXT}: create a new .json, .md or .txt file.
- {"action": "done", "summary": S, "edits": [{"id", "component", "hypothesis", "targets_mode", \
"predicted_affected", "retroactive_check", "addresses"?, "why_not_lower_lever"?, "trigger_condition"?, \
"regression_risk"?}]}: validate the workspace and finish.
Paths are relative to the harness root, use "/" and contain no ".." or empty segment. manifest.json is \
the manifest; a new data file must be listed in some component's "files". You have at most 40 replies \
and 80 file changes. Each result arrives as one message starting "[<action>] ok" or \
"[<action>] error: <why>"; after an error, fix the problem and go on."""


class RoundInfo(Protocol):
    """What the context needs of one round (``rsi_worker.consolidate.draft.DraftContext`` has it)."""

    @property
    def incumbent(self) -> Harness: ...
    @property
    def t(self) -> int: ...
    @property
    def b_t(self) -> int: ...
    @property
    def S_t(self) -> float: ...
    @property
    def delta(self) -> float: ...
    @property
    def params(self) -> ConsolidationParams: ...
    @property
    def records(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def scoreboard(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def analysis(self) -> Mapping[str, Any]: ...
    @property
    def exploration(self) -> Exploration: ...
    @property
    def reserved(self) -> Set[int]: ...
    @property
    def prune(self) -> Sequence[PruneTarget]: ...
    @property
    def enabled(self) -> Sequence[str]: ...
    @property
    def views(self) -> Sequence[View]: ...


def _line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def cacheable_prefix() -> str:
    """The constitution followed by the pattern library (the cacheable prefix of docs/formats.md §6.1)."""
    skill = (CONSTITUTION_DIR / "SKILL.md").read_text(encoding="utf-8")
    patterns = (CONSTITUTION_DIR / "PATTERNS.md").read_text(encoding="utf-8")
    return skill.rstrip() + "\n\n" + patterns.rstrip()


def proposer_system() -> str:
    """The proposer's system prompt: cacheable prefix, proposer brief, action protocol."""
    return "\n\n".join([cacheable_prefix(), PROPOSER_BRIEF, PROTOCOL_TEXT])


def render_history(records: Sequence[Mapping[str, Any]], n: int = HISTORY_ROWS,
                   max_unmeasured: int = HISTORY_UNMEASURED) -> str:
    """docs/formats.md §6.4 ``render``: the last ``n`` rows, of the unmeasured ones only the
    ``max_unmeasured`` latest.

    Unmeasured = ``delta_S`` is None (gate outcomes). One JSON object per row with the keys of
    :data:`HISTORY_KEYS` present in the row (``early_stopped`` only when true); an early-stopped
    row gets ``"note": "ΔS is an upper bound"``. ``"(no history yet)"`` when nothing is left.
    """
    unmeasured = [i for i, r in enumerate(records) if r.get("delta_S") is None]
    drop = set(unmeasured[:-max_unmeasured] if max_unmeasured > 0 else unmeasured)
    kept = [r for i, r in enumerate(records) if i not in drop][-n:] if n > 0 else []
    lines: list[str] = []
    for r in kept:
        row = {k: r[k] for k in HISTORY_KEYS if k in r and k != "early_stopped"}
        if r.get("early_stopped"):
            row["early_stopped"] = True
            row["note"] = UPPER_BOUND_NOTE
        lines.append(_line(row))
    return "\n".join(lines) or "(no history yet)"


def render_scoreboard(rows: Sequence[Mapping[str, Any]], n: int = SCOREBOARD_ROWS) -> str:
    """The last ``n`` attribution rows (docs/algorithm/formulas.md §2.8), one JSON object per line."""
    return "\n".join(_line(dict(r)) for r in list(rows)[-n:]) or "(no attribution rows yet)"


def reserved_sentence(untried: Sequence[str]) -> str:
    """The sentence added to the exploration section when the variant holds a reserved slot."""
    return ("RESERVED SLOT: this variant holds a reserved exploration slot: at least one of its edits must "
            f"land on an untried kind [{', '.join(untried)}], judged by the addresses it touches.")


def exploration_text(expl: Exploration, enabled: Sequence[str], reserved_slot: bool, *,
                     w: int | None = None, delta: float | None = None) -> str:
    """Enabled and untried kinds, the directive (docs/algorithm/formulas.md §2.6) and the reserved-slot
    sentence when it applies."""
    lines = [
        f"enabled kinds: {', '.join(enabled) or '-'}",
        f"untried kinds: {', '.join(expl.untried) or '-'}",
        exploration_directive(expl, w=w, delta=delta)["text"],
    ]
    if reserved_slot and expl.untried:
        lines.append(reserved_sentence(expl.untried))
    return "\n".join(lines)


def render_prune(prune: Sequence[PruneTarget]) -> str:
    """One line per prune target with its recent best gain, then its accepted edits."""
    if not prune:
        return "(empty: every tried kind improved recently, or nothing was tried yet)"
    lines: list[str] = []
    for p in prune:
        gain = "none in the window" if p.recent_best_gain is None else f"{p.recent_best_gain:+.5f}"
        lines.append(f"- {p.component}: recent best gain {gain}; accepted edits in the incumbent: "
                     f"{len(p.accepted_edits_in_incumbent)}")
        lines += [f"    t={a.t} {a.edit_id}: {a.hypothesis} (ΔS {a.delta_S})"
                  for a in p.accepted_edits_in_incumbent]
    return "\n".join(lines)


def render_analysis(report: Mapping[str, Any]) -> str:
    """The analysis report: ranked failure modes, success habits, notes."""
    lines = ["failure modes (ranked by worlds explained):"]
    for m in report.get("failure_modes") or []:
        worlds = ", ".join(str(w) for w in m.get("worlds") or []) or "-"
        lens = f" [{m['lens']}]" if m.get("lens") else ""
        lines.append(f"- {m.get('mode')}{lens}: {m.get('description', '')} (worlds: {worlds})")
    lines.append("success habits:")
    for h in report.get("success_habits") or []:
        worlds = ", ".join(str(w) for w in h.get("worlds") or []) or "-"
        lines.append(f"- {h.get('habit')}: {h.get('description', '')} (worlds: {worlds})")
    if report.get("notes"):
        lines.append(f"notes: {report['notes']}")
    return "\n".join(lines)


def variant_brief(variant: str, t: int, m: int) -> str:
    """"variant X of round t; m variants are drafted independently …"."""
    return (f"You draft variant {variant} of round {t}. {m} variant(s) are drafted independently and "
            "replayed on the same worlds; the best admissible one becomes the agent's harness from its "
            "next turn.")


def budget_sentence(b_t: int) -> str:
    """"make AT MOST {b_t} independent edit(s)" (docs/formats.md §6.1)."""
    return f"make AT MOST {b_t} independent edit(s)."


def _novel_kinds(records: Sequence[Mapping[str, Any]], enabled: Sequence[str]) -> list[str]:
    accepted = {str(r.get("component")) for r in records if r.get("accepted")}
    return [k for k in K_STR if k in enabled and k not in accepted]


def selection_text(ctx: RoundInfo) -> str:
    """The selection rules with this round's numbers (docs/algorithm/consolidation.md §3.9 step 2)."""
    p, S, d = ctx.params, ctx.S_t, ctx.delta
    floor = S - d
    novel = ", ".join(_novel_kinds(ctx.records, ctx.enabled)) or "none"
    worlds = len(ctx.views)
    return "\n".join([
        f"- Every variant is replayed on the same {worlds} world(s), k = {p.k} fresh trial(s) each; the "
        "score S is the share of criteria passed over all trials.",
        f"- The current harness scores S = {S:.4f} on these worlds (S* = S); the noise band is "
        f"delta = {d:.4f}.",
        f"- Floor: a candidate needs S' >= S* - delta = {floor:.4f}.",
        f"- Real gain (gain = S' - S > delta): the relative token-cost change must stay within "
        f"beta0 + beta1 x gain = {p.beta0} + {p.beta1} x gain.",
        f"- In band (gain <= delta): admitted only if {p.w_s} x gain - {p.w_c} x cost change + "
        f"{p.w_n} x nu > 0, nu = structural kinds ({', '.join(K_STR)}) touched that are enabled and never "
        f"accepted (now: {novel}).",
        "- Every edited param must be read during the replays; an edit no trial reads is rejected.",
        f"- The valid-answer rate must not drop by more than {p.max_valid_rate_drop}, and the no-answer rate "
        f"must not rise by more than {p.max_nosub_rise}.",
        "- Ties: higher S, then a known cost before an unknown one, lower cost, fewer edits, earlier "
        "variant label.",
    ])


TASK_TEXT = (
    "Read the traces you need, change the workspace with edit_file / write_file, and finish with done. "
    "Declare one edit per independent mechanism with its retroactive check (corrective, preservative, "
    "transfer) and the world ids you predict it affects."
)
REPAIR_TEXT = (
    "A reviewer rejected your candidate. The workspace still holds it. Fix every reason below (remove "
    "or rewrite the offending content), keep what was fine, and finish with done, declaring the edits "
    "of the repaired candidate."
)


def instruction_budget_sentence(ctx: RoundInfo) -> str:
    """The harness growth budget (docs/security/gate.md, "No-op, duplicate and growth")."""
    used = instruction_chars(surface(ctx.incumbent))
    limit = ctx.params.max_instruction_chars
    return (f"Instruction text budget: {used} of {limit} characters used; a candidate above the budget "
            "that adds text is rejected, so merge or remove blocks to make room. Repeating an instruction "
            "the harness already has (in a block or a skill) is rejected as a duplicate.")


def proposer_user(ctx: RoundInfo, variant: str, index: int,
                  repair: Mapping[str, Any] | None = None) -> str:
    """The first user message of one proposer run (sections of :data:`SECTIONS`).

    Args:
        ctx: the round.
        variant: the variant label (``"A"``…).
        index: the variant index; it holds a reserved slot when it is in ``ctx.reserved``.
        repair: ``{reasons, risk_notes, your_declared_edits}`` in repair mode, else None.
    """
    reserved_slot = index in ctx.reserved
    manifest = ctx.incumbent.manifest
    sections = [
        ("VARIANT", variant_brief(variant, ctx.t, ctx.params.m)),
        ("EDIT HISTORY", render_history(ctx.records)),
        ("SCOREBOARD", render_scoreboard(ctx.scoreboard)),
        ("EXPLORATION", exploration_text(ctx.exploration, ctx.enabled, reserved_slot, w=ctx.params.w,
                                         delta=ctx.delta)),
        ("PRUNE SET", render_prune(ctx.prune)),
        ("ANALYSIS REPORT", render_analysis(ctx.analysis)),
        ("TASK ROWS", "\n".join(task_row(v) for v in ctx.views) or "(no worlds)"),
        ("CURRENT MANIFEST", json.dumps(manifest.to_json(include_parent=False), indent=2,
                                        ensure_ascii=False)),
        ("EDITABLE ADDRESSES", "\n".join(editable_addresses(manifest))),
        ("BUDGET", budget_sentence(ctx.b_t) + "\n" + instruction_budget_sentence(ctx)),
        ("SELECTION RULES", selection_text(ctx)),
    ]
    if repair is None:
        sections.append(("TASK", TASK_TEXT))
    else:
        payload = json.dumps(dict(repair), ensure_ascii=False, indent=2)
        sections.append(("REPAIR", REPAIR_TEXT + "\n" + payload))
    return "\n\n".join(f"{header}:\n{body}" for header, body in sections)
