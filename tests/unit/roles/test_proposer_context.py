"""The proposer's context (docs/formats.md §6.1 "Context", §6.4 render, docs/algorithm/consolidation.md §3.9
selection text)."""

from __future__ import annotations

import dataclasses
import json
import re

from rsi_common.math import AcceptedEdit, Exploration, PruneTarget
from rsi_worker.consolidate.draft import DraftContext
from rsi_worker.roles.proposer_context import (
    CONSTITUTION_ID,
    SECTIONS,
    cacheable_prefix,
    exploration_text,
    proposer_system,
    proposer_user,
    render_history,
    render_prune,
    selection_text,
)


def row(t: int, dS: float | None, **kw: object) -> dict[str, object]:
    return {"t": t, "variant": "A", "edit_id": "E1", "component": "prompt", "hypothesis": "h", "delta_S": dS,
            "delta_C": None if dS is None else 0.0, "accepted": False,
            "outcome": "REJECTED" if dS else "critic_reject",
            "bundle": 1, "detail": "d", "diff": "+secret diff", "ts": "2024-01-01 00:00:00", **kw}


def test_history_render_rules() -> None:
    rows = [row(i, None) for i in range(6)] + [row(6, -0.1, early_stopped=True, delta_C_partial=True),
                                               row(7, 0.2, early_stopped=False)]
    lines = [json.loads(x) for x in render_history(rows).splitlines()]
    assert [r["t"] for r in lines] == [2, 3, 4, 5, 6, 7]  # only the 4 latest unmeasured rows
    assert lines[4]["early_stopped"] is True and lines[4]["note"] == "ΔS is an upper bound"
    assert "early_stopped" not in lines[5] and "note" not in lines[5]
    assert "diff" not in lines[0] and "ts" not in lines[0] and lines[4]["delta_C_partial"] is True
    many = [row(i, 0.01) for i in range(50)]
    assert [json.loads(x)["t"] for x in render_history(many).splitlines()] == list(range(10, 50))
    assert render_history([]) == "(no history yet)"


def test_sections_in_order(ctx: DraftContext) -> None:
    text = proposer_user(ctx, "B", 1)
    headers = [h for h in re.findall(r"(?m)^([A-Z][A-Z ]+):$", text) if h in SECTIONS]
    assert headers == [h for h in SECTIONS if h != "REPAIR"]
    assert "VARIANT:\nYou draft variant B of round 0. 2 variant(s) are drafted independently" in text
    assert "BUDGET:\nmake AT MOST 3 independent edit(s)." in text
    assert "RESERVED SLOT" not in text
    manifest = text.split("CURRENT MANIFEST:\n", 1)[1].split("\n\nEDITABLE ADDRESSES:", 1)[0]
    assert json.loads(manifest)["name"] == "h0"
    editable = text.split("EDITABLE ADDRESSES:\n", 1)[1].split("\n\nBUDGET:", 1)[0].splitlines()
    assert "prompt.system.params.extra_blocks" in editable
    assert not any("max_iterations" in a for a in editable)
    assert "- missing-table [format]:" in text
    repair = proposer_user(ctx, "B", 1, {"reasons": ["r1"], "risk_notes": [], "your_declared_edits": []})
    assert "\n\nREPAIR:\nA reviewer rejected" in repair and "TASK:" not in repair
    assert '"reasons": [\n    "r1"\n  ]' in repair


def test_reserved_sentence_and_directive(ctx: DraftContext) -> None:
    stall = dataclasses.replace(ctx, exploration=Exploration(1, ("skill", "memory"), 1),
                                reserved=frozenset({1}))
    b, a = proposer_user(stall, "B", 1), proposer_user(stall, "A", 0)
    assert "untried kinds: skill, memory" in b and "STALL" in b and "RESERVED for never-exercised kinds" in b
    assert "RESERVED SLOT: this variant holds a reserved exploration slot" in b
    assert "RESERVED SLOT: this variant" not in a
    text = exploration_text(Exploration(0, (), 1), ["prompt"], True)
    assert text == "enabled kinds: prompt\nuntried kinds: -\nEvery enabled kind has been exercised."


def test_selection_text_numbers(ctx: DraftContext) -> None:
    c = dataclasses.replace(ctx, S_t=0.5, delta=0.125,
                            records=[{"t": 0, "component": "skill", "accepted": True, "delta_S": 0.2}])
    text = selection_text(c)
    assert "S = 0.5000" in text and "delta = 0.1250" in text and "S* - delta = 0.3750" in text
    assert "0.1 + 35.4 x gain" in text and "100.0 x gain - 15.0 x cost change + 0.5 x nu > 0" in text
    assert "(now: client_tool, memory)" in text
    assert "every edited param must be read" in text.lower()
    assert "must not drop by more than 0.15" in text
    assert "Ties: higher S, then a known cost before an unknown one, lower cost, fewer edits" in text


def test_prune_render() -> None:
    target = PruneTarget("prompt", -0.05, (AcceptedEdit(1, "E1", "tables", 0.3),))
    assert render_prune([target, PruneTarget("skill", None)]).splitlines() == [
        "- prompt: recent best gain -0.05000; accepted edits in the incumbent: 1",
        "    t=1 E1: tables (ΔS 0.3)",
        "- skill: recent best gain none in the window; accepted edits in the incumbent: 0",
    ]


def test_system_prompt_is_the_cacheable_prefix_then_brief_and_protocol() -> None:
    system = proposer_system()
    prefix = cacheable_prefix()
    assert system.startswith(prefix) and f"name: {CONSTITUTION_ID}" in prefix
    assert "# Mechanism patterns" in prefix and "## The twelve hard rules" in prefix
    assert system.index("ROLE\n") < system.index("PROTOCOL\n")
    assert len(re.findall(r"(?m)^\d+\. \*\*", prefix.split("## The twelve hard rules", 1)[1])) == 12
