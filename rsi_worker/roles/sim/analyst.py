"""The sim model's analyst (docs/formats.md#sim-4-the-roles), role ``analyst``.

Reads the analyst prompt of docs/algorithm/consolidation.md §3.8 (:mod:`rsi_worker.roles.analyst`) the way a
model would, by
the header constants its builder writes: the blocks under the ``FAILING WORLDS`` and
``PASSING WORLDS`` header lines, each world starting with a ``WORLD <id> — …`` line and holding
``REQUEST``, ``FINAL ANSWER`` and ``JUDGE`` sections.

* **Failure modes**: a trait is *missing* in a failing world when the criterion text of one of its
  ``[FAIL]`` judge lines triggers the trait (``traits_in``, with the world's request for
  ``korean``) and the detector does not find it in the world's FINAL ANSWER. One mode per missing
  trait, named ``missing-<trait>``, with the worlds it explains; ranked by the number of worlds,
  ties in catalog order.
* **Success habits**: traits detected in the FINAL ANSWER of passing worlds, named ``has-<trait>``,
  ranked the same way.

Reply ``{"failure_modes": [{mode, description, worlds, lens, evidence}], "success_habits": [{habit,
description, worlds}], "notes"}``. Descriptions are general (never conversation content).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi_common.llm.sim.core import SimCall, json_reply, message_text
from rsi_common.llm.sim.traits import DETECTORS, TRAITS, traits_in
from rsi_worker.roles.analyst import (
    FAILING_WORLDS,
    PASSING_WORLDS,
    PRIOR_NAMES,
    SECTION_ANSWER,
    SECTION_JUDGE,
    SECTION_REQUEST,
    WORLD_HEADER,
    WORLD_SECTIONS,
)

__all__ = ["TRAIT_NEEDS", "WorldBlock", "analyst", "analyze_prompt", "parse_worlds"]

TRAIT_NEEDS: Mapping[str, str] = {
    "table": "answers that compare options are not laid out as a markdown table",
    "one_line_reco": "the recommendation is not kept to a single line",
    "bullets": "lists of facts are not written as bullet points",
    "brief": "answers are longer than asked and open with a preamble",
    "units": "numbers are reported without their units",
    "cite": "answers do not name where their numbers came from",
    "korean": "answers are not written in the language of the request",
}
"""Trait → the general need a missing trait reveals (the mode descriptions)."""

_WORLD = re.compile(rf"^{re.escape(WORLD_HEADER)} (\S+) — ")
_JUDGE_LINE = re.compile(r"^\[(PASS|FAIL)\] \(([^)]*)\) (.*)$")
_STEP_LINE = re.compile(
    r"^(?:\[step \d+\] AGENT:|TOOL_CALL |TOOL_RESULT|TOOL_ERROR|\(steps of the recorded turn)"
)


@dataclass
class WorldBlock:
    """One rendered world: id, request, final answer and judge lines ``(passed, name, criterion)``."""

    id: str
    request: str = ""
    answer: str = ""
    verdicts: list[tuple[bool, str, str]] = field(default_factory=list)


def _criterion(rest: str) -> str:
    """The criterion of a judge line's tail ``<criterion> — <reason>`` (split at the last dash)."""
    head, sep, _ = rest.rpartition(" — ")
    return head if sep else rest


def parse_worlds(block: str) -> list[WorldBlock]:
    """The worlds of one prompt section, in order."""
    worlds: list[WorldBlock] = []
    section = ""
    lines: dict[str, list[str]] = {}
    for line in block.splitlines():
        m = _WORLD.match(line)
        if m is not None:
            worlds.append(WorldBlock(m.group(1)))
            section, lines = "", {}
            continue
        if not worlds:
            continue
        if line in WORLD_SECTIONS:
            section = line
            continue
        if section == SECTION_REQUEST and _STEP_LINE.match(line):
            section = "STEPS"
        w = worlds[-1]
        if section == SECTION_JUDGE:
            j = _JUDGE_LINE.match(line)
            if j is not None:
                w.verdicts.append((j.group(1) == "PASS", j.group(2), _criterion(j.group(3))))
        elif section in (SECTION_REQUEST, SECTION_ANSWER):
            lines.setdefault(section, []).append(line)
            w.request = "\n".join(lines.get(SECTION_REQUEST, [])).strip()
            w.answer = "\n".join(lines.get(SECTION_ANSWER, [])).strip()
    return worlds


def _split(prompt: str) -> tuple[str, str]:
    failing, passing = "", ""
    m_fail, m_pass, m_prior = (re.search(rf"(?m)^{re.escape(h)}$", prompt)
                               for h in (FAILING_WORLDS, PASSING_WORLDS, PRIOR_NAMES))
    end = m_prior.start() if m_prior else len(prompt)
    if m_fail is not None:
        failing = prompt[m_fail.end(): m_pass.start() if m_pass else end]
    if m_pass is not None:
        passing = prompt[m_pass.end(): end]
    return failing, passing


def _ranked(hits: Mapping[str, list[str]]) -> list[str]:
    return sorted(hits, key=lambda t: (-len(hits[t]), TRAITS.index(t)))


def analyze_prompt(prompt: str) -> dict[str, Any]:
    """The sim analyst's report for an analyst user prompt (module docstring)."""
    failing, passing = (parse_worlds(part) for part in _split(prompt))
    missing: dict[str, list[str]] = {}
    evidence: dict[str, str] = {}
    for w in failing:
        for passed, name, criterion in w.verdicts:
            if passed:
                continue
            for trait in traits_in(criterion, request=w.request):
                if not DETECTORS[trait](w.answer) and w.id not in missing.setdefault(trait, []):
                    missing[trait].append(w.id)
                    why = f"a failed criterion ({name}) asks for it and the answer lacks it"
                    evidence.setdefault(trait, why)
    present: dict[str, list[str]] = {}
    for w in passing:
        for trait in TRAITS:
            if DETECTORS[trait](w.answer):
                present.setdefault(trait, []).append(w.id)
    modes = [{"mode": f"missing-{t}", "description": TRAIT_NEEDS[t], "worlds": missing[t], "lens": "format",
              "evidence": evidence[t]} for t in _ranked(missing)]
    habits = [{"habit": f"has-{t}", "description": f"passing answers show the {t} trait",
               "worlds": present[t]} for t in _ranked(present)]
    notes = f"{len(failing)} failing and {len(passing)} passing world(s) read"
    return {"failure_modes": modes, "success_habits": habits, "notes": notes}


def _user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return message_text(dict(m))
    return ""


def analyst(call: SimCall) -> list[dict[str, Any]]:
    """Answer one analyst call (the first user message is the analyst prompt)."""
    first = next((m for m in call.request.messages if m.get("role") == "user"), None)
    prompt = message_text(first) if first is not None else _user_text(call.request.messages)
    return json_reply(analyze_prompt(prompt))
