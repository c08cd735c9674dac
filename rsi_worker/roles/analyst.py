"""Evidence rendering and the analyst role (docs/algorithm/consolidation.md §3.8).

A *view* is one evaluation world seen through one incumbent trial: the world, the chosen trial row
(or none), the world's checks and the incumbent mean. :func:`render` turns it into the text the
analyst and the proposer read; :func:`analyze` makes one JSON call and returns the report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi_common.llm import ModelClient, complete_json
from rsi_common.world import text_of
from rsi_worker.roles.report_items import kept_items, kept_notes

__all__ = [
    "ANALYST_SYSTEM",
    "LENSES",
    "PROMPT_SECTIONS",
    "WORLD_HEADER",
    "WORLD_SECTIONS",
    "View",
    "analyst_user_prompt",
    "analyze",
    "render",
    "task_row",
]

PROMPT_SECTIONS = ("FAILING WORLDS", "PASSING WORLDS", "PRIOR NAMES")
"""Header lines of the analyst prompt, in order, each alone on its line (the sim analyst reads them)."""
FAILING_WORLDS, PASSING_WORLDS, PRIOR_NAMES = PROMPT_SECTIONS
WORLD_HEADER = "WORLD"
"""A rendered world starts with the line ``WORLD <id> — …``."""
WORLD_SECTIONS = ("EARLIER CONVERSATION (last messages)", "REQUEST", "FINAL ANSWER", "JUDGE")
"""Section lines of one rendered world, in order, each alone on its line (:func:`render`)."""
SECTION_EARLIER, SECTION_REQUEST, SECTION_ANSWER, SECTION_JUDGE = WORLD_SECTIONS
LENSES = ("instruction", "wrong_method", "capability_gap", "format", "context", "control")
FAIL_BELOW = 1 - 1e-9
MAX_FAILING, MAX_PASSING = 6, 3

ANALYST_SYSTEM = (
    "You study one production agent. Each WORLD below is a past turn with a real user: the earlier "
    "conversation, the request, the steps with recorded tool results, the final answer and a JUDGE "
    "section with PASS/FAIL per criterion derived from that user's own signals. The trajectories "
    "are trials of the agent's current harness (how its turns are assembled and run).\n"
    "Name the recurring failure modes and the habits that passing worlds rely on. Rank modes by "
    "the number of worlds they explain. Name them in general terms, never by conversation content "
    "(no names, numbers, facts or quotes). Reuse a prior name when it fits.\n"
    'Reply with one JSON object: {"failure_modes": [{"mode", "description", "worlds": [ids], '
    '"lens": one of ' + ", ".join(LENSES) + ', "evidence"}], "success_habits": [{"habit", '
    '"description", "worlds": [ids]}], "notes": "..."}'
)


@dataclass(frozen=True)
class View:
    """One world seen through one incumbent trial (``row`` None = no trial)."""

    world: Any
    row: Mapping[str, Any] | None
    checks: Sequence[Mapping[str, Any]] = ()
    mean: float = 0.0
    verdicts: Sequence[Mapping[str, Any]] = field(default_factory=tuple)

    @property
    def replay(self) -> Mapping[str, Any]:
        return ((self.row or {}).get("result") or {}).get("replay") or {}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _steps(transcript: Sequence[Mapping[str, Any]], clip: int) -> list[str]:
    lines: list[str] = []
    step = 0
    for msg in transcript:
        content = msg.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
        if msg.get("role") == "assistant":
            step += 1
        for b in blocks:
            kind = b.get("type")
            if kind == "text" and msg.get("role") == "assistant" and str(b.get("text") or "").strip():
                lines.append(f"[step {step}] AGENT: {_clip(str(b['text']), clip)}")
            elif kind == "tool_use":
                args = json.dumps(b.get("input"), ensure_ascii=False, sort_keys=True)
                lines.append(f"TOOL_CALL {b.get('name')}({_clip(args, 400)})")
            elif kind == "tool_result":
                label = "TOOL_ERROR" if b.get("is_error") else "TOOL_RESULT"
                lines.append(f"{label} {_clip(text_of(b.get('content')), clip // 2)}")
    return lines


def render(view: View, detail: bool = False) -> str:
    """The text of one view (docs/algorithm/consolidation.md §3.8); strings clipped to 6,000 chars with
    ``detail``, else 1,500."""
    clip = 6_000 if detail else 1_500
    w, rep = view.world, view.replay
    source = (view.row or {}).get("source")
    out = [f"{WORLD_HEADER} {w.id} — one past turn of this agent (trial: {source or 'no trial'})"]
    if view.row is not None:
        out.append(
            f"status: {rep.get('status', '')} | termination: {rep.get('termination_reason', '')} | "
            f"policy_tokens: {rep.get('policy_tokens', 0)} | steps: {rep.get('steps', 0)} | "
            f"off_support: {rep.get('off_support', 0)} | score: {view.mean:.2f}"
        )
    history = [m for m in w.history if text_of(m.get("content")).strip()][-6:]
    if history:
        out.append(SECTION_EARLIER)
        for m in history:
            who = "User" if m.get("role") == "user" else "Assistant"
            out.append(f"{who}: {_clip(text_of(m.get('content')).strip(), 600)}")
    out += [SECTION_REQUEST, _clip(w.request, clip)]
    transcript = rep.get("transcript") or []
    if not transcript:
        transcript = (w.data.get("outcome") or {}).get("transcript") or []
        if transcript:
            out.append("(steps of the recorded turn; this trial kept no transcript)")
    out += _steps(transcript, clip)
    answer = str(rep.get("answer") if view.row is not None else w.answer)
    out += [SECTION_ANSWER, _clip(answer or "", clip)]
    verdicts = view.verdicts or ((view.row or {}).get("result") or {}).get("verdicts") or []
    if verdicts:
        out.append(SECTION_JUDGE)
        for v in verdicts:
            mark = "PASS" if v.get("pass") else "FAIL"
            out.append(f"[{mark}] ({v.get('name')}) {v.get('criterion')} — {v.get('reason', '')}")
    return "\n".join(out)


def task_row(view: View) -> str:
    """``"<id> | score <mean> | failed <names or -> | <request preview>"``."""
    verdicts = view.verdicts or ((view.row or {}).get("result") or {}).get("verdicts") or []
    failed = ",".join(str(v.get("name")) for v in verdicts if not v.get("pass")) or "-"
    preview = " ".join(view.world.request.split())[:100]
    return f"{view.world.id} | score {view.mean:.2f} | failed {failed} | {preview}"


def analyst_user_prompt(views: Sequence[View], prior: Mapping[str, Any]) -> str:
    """Up to 6 failing views (worst first, detailed) and 3 passing ones (best first), plus prior names."""
    ordered = sorted(views, key=lambda v: v.mean)
    failing = [v for v in ordered if v.mean < FAIL_BELOW][:MAX_FAILING]
    passing = [v for v in reversed(ordered) if v.mean >= FAIL_BELOW][:MAX_PASSING]
    parts = [FAILING_WORLDS] + [render(v, detail=True) for v in failing]
    parts += [PASSING_WORLDS] + [render(v) for v in passing]
    modes = [m.get("mode") for m in prior.get("failure_modes") or []]
    habits = [h.get("habit") for h in prior.get("success_habits") or []]
    parts.append(
        f"{PRIOR_NAMES}\nfailure modes: "
        + (", ".join(map(str, modes)) or "-")
        + "\nsuccess habits: "
        + (", ".join(map(str, habits)) or "-")
    )
    return "\n\n".join(parts)


def analyze(client: ModelClient, views: Sequence[View], prior: Mapping[str, Any],
            focus: str = "") -> dict[str, Any]:
    """One analyst call; a failure gives an empty report with ``notes`` saying why. ``focus``: a
    refine's focus line, put before the report (docs/runtime/refine.md#run)."""
    user = analyst_user_prompt(views, prior)
    try:
        report = complete_json(
            client, system=ANALYST_SYSTEM, user=f"{focus}\n\n{user}" if focus else user, max_tokens=4096
        )
    except Exception as exc:
        return {
            "failure_modes": [],
            "success_habits": [],
            "notes": f"analysis unavailable: {type(exc).__name__}",
        }
    return {"failure_modes": kept_items(report, "failure_modes", "mode"),
            "success_habits": kept_items(report, "success_habits", "habit"),
            "notes": kept_notes(report)}
