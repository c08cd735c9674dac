"""The sim model's critic (docs/formats.md#sim-4-the-roles), role ``critic``.

The deterministic precheck of docs/formats.md §6.2 runs before the model (:mod:`rsi_worker.gate.precheck`);
this
behaviour is the model stage. It reads the review payload by the sections its builder writes
(:data:`~rsi_worker.roles.critic.PAYLOAD_SECTIONS`: ``RECENT USER MESSAGES`` and ``DIFF``) and
rejects when

1. an added line (``+``, not ``+++``; JSON string escapes decoded) contains a quoted user sentence:
   a clause of a listed user message — messages split at ``. ! ? ; : ,`` and line ends — of at least
   :data:`MIN_CLAUSE_WORDS` words and :data:`MIN_CLAUSE_CHARS` characters, compared case-insensitively
   with whitespace collapsed;
2. an added line contains the word "lesson(s)" or the phrase "conversation summary";
3. the diff removes a safety component (more ``"kind": "<safety kind>"`` lines removed than added,
   with the safety kinds ``context_mgmt``, ``control_flow``, ``client_tool``), disables one (an added
   ``"enabled": false`` whose nearest preceding ``"kind"`` line *in the diff* names a safety kind; the
   diff's context may not show the kind, and then the sim cannot tell) or switches a
   safety param off (``completion_review`` / ``guard`` / ``gate_reachability`` false,
   ``repeat_stop_after`` / ``turn_budget_soft`` / ``turn_budget_hard`` 0);
4. rule 12 (docs/runtime/refine.md#privilege-screen): an added line names an admin, debug or console
   channel (:data:`EXPLOIT_CHANNEL`: ``rcon``, ``admin_console``, "debug mode", "god mode", "cheat
   code" …), a spec loophole, monitor evasion (the gate's :data:`~rsi_worker.gate.exploits.EVASION`)
   or claims a tool or permission that was never granted (:data:`UNGRANTED_CLAIM`);

else it accepts. Reasons never repeat the user's text (they are stored with the run).
"""

from __future__ import annotations

import json
import re
from typing import Any

from rsi_common.llm.sim.core import SimCall, json_reply, message_text, parse_sections
from rsi_worker.gate.exploits import EVASION
from rsi_worker.roles.critic import PAYLOAD_SECTIONS

__all__ = ["EXPLOIT_CHANNEL", "MIN_CLAUSE_CHARS", "MIN_CLAUSE_WORDS", "UNGRANTED_CLAIM", "critic",
           "review_payload", "user_clauses"]

_, _, _, _USERS, _DIFF = PAYLOAD_SECTIONS
MIN_CLAUSE_WORDS, MIN_CLAUSE_CHARS = 5, 20
SAFETY_KINDS = ("context_mgmt", "control_flow", "client_tool")
_CLAUSE_SPLIT = re.compile(r"[.!?;:,\n]+")
_LESSON = re.compile(r"(?<!\w)lessons?(?!\w)|conversation summary", re.IGNORECASE)
_KIND = re.compile(r'"kind"\s*:\s*"([a-z_]+)"')
_SAFETY_OFF = re.compile(
    r'"(?:completion_review|guard|gate_reachability)"\s*:\s*false|'
    r'"(?:repeat_stop_after|turn_budget_soft|turn_budget_hard)"\s*:\s*0(?![\d.])'
)
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
EXPLOIT_CHANNEL = re.compile(
    r"(?i)(?<!\w)(rcon|admin[ _-]?(console|channel|panel|mode|command)s?|"
    r"debug[ _-]?(console|channel|mode|menu)|(god|cheat|dev)[ _-]?mode|cheat[ _-]?codes?|"
    r"console[ _-]?commands?|loophole)(?!\w)")
"""Admin, debug or console channels and spec loopholes (rule 12)."""
UNGRANTED_CLAIM = re.compile(
    r"(?i)\byou (?:now )?(?:have|were given|are granted) (?:full |unrestricted |admin(?:istrator)? )"
    r"(?:access|permissions?|rights|privileges)")
"""A claim of a permission never granted (rule 12)."""


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def user_clauses(section: str) -> list[str]:
    """Normalised clauses of the listed user messages (``- "<text>"`` lines)."""
    out: list[str] = []
    for line in section.splitlines():
        text = line.strip()
        if text.startswith("- "):
            text = text[2:]
        text = text.strip().strip('"')
        for clause in _CLAUSE_SPLIT.split(text):
            c = _norm(clause)
            if len(c.split()) >= MIN_CLAUSE_WORDS and len(c) >= MIN_CLAUSE_CHARS and c not in out:
                out.append(c)
    return out


def _decoded(line: str) -> str:
    parts = [line]
    for m in _JSON_STRING.finditer(line):
        try:
            parts.append(json.loads(f'"{m.group(1)}"'))
        except ValueError:
            continue
    return "\n".join(parts)


def _safety_removed(diff: str) -> str | None:
    removed: dict[str, int] = {}
    added: dict[str, int] = {}
    last_kind = ""
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            continue
        m = _KIND.search(line)
        if m is not None:
            last_kind = m.group(1)
            if line.startswith("-"):
                removed[last_kind] = removed.get(last_kind, 0) + 1
            elif line.startswith("+"):
                added[last_kind] = added.get(last_kind, 0) + 1
        if line.startswith("+") and _SAFETY_OFF.search(line):
            return "switches off a safety mechanism"
        if line.startswith("+") and re.search(r'"enabled"\s*:\s*false', line) and last_kind in SAFETY_KINDS:
            return f"disables a {last_kind} component"
    for kind in SAFETY_KINDS:
        if removed.get(kind, 0) > added.get(kind, 0):
            return f"removes a {kind} component"
    return None


def review_payload(payload: str) -> dict[str, Any]:
    """The sim critic's verdict for a review payload (module docstring)."""
    s = parse_sections(payload, PAYLOAD_SECTIONS)
    clauses = user_clauses(s.get(_USERS, ""))
    diff = s.get(_DIFF, "")
    reasons: list[str] = []
    added = [_decoded(ln[1:]) for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    if any(c in _norm(text) for text in added for c in clauses):
        reasons.append("an added line quotes what a user wrote in a recorded conversation (leakage)")
    if any(_LESSON.search(text) for text in added):
        reasons.append("injects lessons or a conversation summary (memory of user data)")
    if any(EXPLOIT_CHANNEL.search(t) or EVASION.search(t) or UNGRANTED_CLAIM.search(t) for t in added):
        reasons.append("rule 12: an exploit channel, loophole, monitor evasion or ungranted privilege")
    safety = _safety_removed(diff)
    if safety is not None:
        reasons.append(f"{safety} without a replacement")
    if reasons:
        return {"verdict": "reject", "reasons": reasons, "risk_notes": []}
    return {"verdict": "accept", "reasons": [], "risk_notes": []}


def critic(call: SimCall) -> list[dict[str, Any]]:
    """Answer one critic call (the first user message is the review payload)."""
    first = next((m for m in call.request.messages if m.get("role") == "user"), None)
    return json_reply(review_payload(message_text(first) if first is not None else ""))
