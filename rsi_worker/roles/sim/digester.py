"""The sim model's digester and reporter (docs/algorithm/evolve.md#analysis), roles ``digester`` and
``reporter``.

* **digester**: with no tool result yet it calls ``read_file trace.md``; then it reads the rendered
  world in that result the way the sim analyst does (:func:`rsi_worker.roles.sim.analyst.parse_worlds`)
  and calls ``return``: for a failing trace, ``blocker`` = the first ``missing-<trait>`` (a ``[FAIL]``
  criterion triggers the trait and the answer lacks it) and ``needed_instead`` = every such mode with its
  need, one per line; for a passing trace, ``narrative`` = the ``has-<trait>`` habits its answer shows.
* **reporter**: groups the digests' ``missing-<trait>`` modes (from ``blocker`` and ``needed_instead``)
  and ``has-<trait>`` habits by world, ranked by the number of worlds, ties in trait order;
  ``capability_gaps`` = modes whose digests say lens ``capability_gap`` (the sim never does).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from rsi_common.llm.sim.core import SimCall, json_reply, message_text, result_text
from rsi_common.llm.sim.traits import DETECTORS, TRAITS, traits_in
from rsi_worker.roles.digester import DIGESTS_HEADER, TRACE_FILE
from rsi_worker.roles.sim.analyst import TRAIT_NEEDS, parse_worlds

__all__ = ["digester", "reporter"]

_MODE = re.compile(r"\bmissing-([a-z_]+)\b")
_HABIT = re.compile(r"\bhas-([a-z_]+)\b")


def _tool_use(call: SimCall, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    digest = hashlib.sha256(json.dumps([call.request.messages, name], default=str).encode()).hexdigest()
    return [{"type": "tool_use", "id": "toolu_sim_" + digest[:20], "name": name, "input": args}]


def digester(call: SimCall) -> list[dict[str, Any]]:
    """Answer one digester call (module docstring)."""
    results = [
        b
        for m in call.request.messages
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    if not results:
        return _tool_use(call, "read_file", {"path": TRACE_FILE})
    worlds = parse_worlds(result_text(results[-1]))
    first = message_text(dict(call.request.messages[0]))
    failing = "(fail" in first
    missing: list[str] = []
    evidence = ""
    for w in worlds:
        for passed, name, criterion in w.verdicts:
            if passed:
                continue
            for trait in traits_in(criterion, request=w.request):
                if not DETECTORS[trait](w.answer) and trait not in missing:
                    missing.append(trait)
                    evidence = evidence or f"[FAIL] ({name})"
    has = [t for t in TRAITS if worlds and DETECTORS[t](worlds[0].answer)]
    out = {
        "lens": "format",
        "blocker": f"missing-{missing[0]}" if failing and missing else "",
        "narrative": (
            "the answer lacks what a failed check asks for"
            if failing
            else "habits: " + ", ".join(f"has-{t}" for t in has)
        ),
        "evidence": "a failed criterion asks for it and the answer lacks it" if missing else "",
        "verifier_evidence": evidence,
        "needed_instead": "\n".join(f"missing-{t}: {TRAIT_NEEDS[t]}" for t in missing) if failing else "",
    }
    return _tool_use(call, "return", out)


def reporter(call: SimCall) -> list[dict[str, Any]]:
    """Answer one reporter call (module docstring)."""
    first = next((m for m in call.request.messages if m.get("role") == "user"), None)
    text = message_text(dict(first)) if first is not None else ""
    _, _, body = text.partition(DIGESTS_HEADER + "\n")
    modes: dict[str, list[str]] = {}
    habits: dict[str, list[str]] = {}
    gaps: set[str] = set()
    for line in body.splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        world = str(d.get("world") or "")
        for trait in _MODE.findall(f"{d.get('blocker', '')}\n{d.get('needed_instead', '')}"):
            if trait in TRAIT_NEEDS and world not in modes.setdefault(trait, []):
                modes[trait].append(world)
                if d.get("lens") == "capability_gap":
                    gaps.add(trait)
        for trait in _HABIT.findall(str(d.get("narrative") or "")):
            if trait in TRAITS and world not in habits.setdefault(trait, []):
                habits[trait].append(world)

    def ranked(hits: dict[str, list[str]]) -> list[str]:
        return sorted(hits, key=lambda t: (-len(hits[t]), TRAITS.index(t)))

    failure_modes = [
        {
            "mode": f"missing-{t}",
            "description": TRAIT_NEEDS[t],
            "worlds": modes[t],
            "lens": "format",
            "evidence": "digests of failing traces name it",
        }
        for t in ranked(modes)
    ]
    return json_reply(
        {
            "failure_modes": failure_modes,
            "capability_gaps": [m for t, m in zip(ranked(modes), failure_modes, strict=True) if t in gaps],
            "success_habits": [
                {
                    "habit": f"has-{t}",
                    "description": f"passing answers show the {t} trait",
                    "worlds": habits[t],
                }
                for t in ranked(habits)
            ],
        }
    )
