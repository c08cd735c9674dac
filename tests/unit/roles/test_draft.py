"""Drafting a candidate (docs/algorithm/consolidation.md §3.9) end to end with the sim model on the
docs/formats.md demo scenario."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from rsi_common.config import ConsolidationParams, SimConfig
from rsi_common.errors import ManifestError
from rsi_common.harness import H0_VERSION, h0, materialize, workspace_of
from rsi_common.kinds import K_ENABLED_PRODUCTION
from rsi_common.llm import ModelRequest
from rsi_common.llm.sim import SimClient
from rsi_common.math import Edit, Exploration
from rsi_common.world import TurnWorld
from rsi_worker.consolidate import draft as draft_mod
from rsi_worker.consolidate.draft import RESERVED_REASON, Draft, DraftContext, draft_candidate
from rsi_worker.roles import proposer as proposer_mod
from tests.unit.roles.helpers import Scripted, edit, view_of

H0_MANIFEST = workspace_of(h0())["manifest.json"]


def sim(role: str, config: SimConfig | None = None) -> SimClient:
    return SimClient("sim-1", config, role=role)


def draft(ctx: DraftContext, variant: str = "A", *, proposer: Any = None, critic: Any = None) -> Draft:
    index = "ABCDEFGH".index(variant)
    return draft_candidate(ctx, variant, index, proposer=proposer or sim("proposer"),
                           critic=critic or sim("critic"))


def stalled(ctx: DraftContext, untried: tuple[str, ...]) -> DraftContext:
    """The round with a stall: ``untried`` kinds, variant B (index 1) holds the reserved slot."""
    return dataclasses.replace(ctx, exploration=Exploration(1, untried, 1), reserved=frozenset({1}))


def test_variant_a_adds_prompt_blocks_and_fixes_the_worlds(ctx: DraftContext) -> None:
    d = draft(ctx, "A")
    assert d.live and d.gate is None and d.review is not None and d.review["verdict"] == "accept"
    harness = materialize(d.payload or {})
    assert d.version == harness.version and harness.manifest.parent == H0_VERSION
    blocks = harness.manifest.component("prompt.system").params["extra_blocks"]
    assert any("table" in b for b in blocks)
    assert any("single line" in b and "Recommendation:" in b for b in blocks)
    assert [(e["component"], e["declared_component"]) for e in d.edits] == [("prompt", "prompt")] * 2
    assert [e["targets_mode"] for e in d.edits] == ["missing-table", "missing-one_line_reco"]
    assert [Edit.from_json(e).component for e in d.edits] == ["prompt", "prompt"]  # what judging reads
    assert d.set_addresses == ["prompt.system.params.extra_blocks"]
    assert d.touched == [{"address": "prompt.system.params.extra_blocks", "component_id": "prompt.system",
                          "kind": "prompt", "op": "set"}]
    assert d.diff.startswith("diff --git a/harness/manifest.json b/harness/manifest.json")
    assert d.usage["proposer"]["calls"] == 3 and d.usage["critic"]["calls"] == 1
    assert d.usage["proposer"]["input_tokens"] > 0
    for v in ctx.views:  # the candidate passes every criterion on replay
        assert view_of(v.world, harness).mean == 1.0


def test_variant_b_is_skill_based(ctx: DraftContext) -> None:
    d = draft(ctx, "B")
    assert d.live
    harness = materialize(d.payload or {})
    library = harness.manifest.component("skills.library")
    assert library.kind == "skill"
    assert library.files == ("skills/table/SKILL.md", "skills/one_line_reco/SKILL.md")
    assert "description: When you compare options, present them as a markdown table." in harness.files[
        "skills/table/SKILL.md"]
    assert {e["component"] for e in d.edits} == {"skill"}
    assert d.set_addresses == []
    for v in ctx.views:
        assert view_of(v.world, harness).mean == 1.0


def test_leaky_proposer_is_screened_and_repaired_without_the_user_text(ctx: DraftContext) -> None:
    """The screen rejects the pasted correction before any model call; the repair drops it."""
    d = draft(ctx, "A", proposer=sim("proposer", SimConfig(leaky=True)))
    assert d.live and d.review is not None and d.review["stage"] == "model"
    assert d.usage["critic"]["calls"] == 1  # only the repaired candidate reached the model
    assert "a user wrote" not in d.diff and "show it as a table" not in d.diff
    no_repair = dataclasses.replace(ctx, params=ConsolidationParams(repair_rounds=0))
    d0 = draft(no_repair, "A", proposer=sim("proposer", SimConfig(leaky=True)))
    assert d0.gate == "critic_reject" and d0.payload is None and d0.usage["critic"]["calls"] == 0
    assert d0.review is not None and d0.review["stage"] == "untrusted"
    assert "user text at prompt.system.params.extra_blocks" in d0.detail
    assert "'show it as a table and keep the recommendation to one line'" in d0.detail


def _scripted_change(old: str, new: str) -> Scripted:
    return Scripted([{"action": "edit_file", "path": "manifest.json", "old": old, "new": new},
                     {"action": "done", "summary": "s", "edits": [edit()]}, {"action": "abort"}])


@pytest.mark.parametrize(("old", "new", "violation"), [
    ('"locked": [', '"locked": [\n    "prompt.*",', "platform field locked changed"),
    ('"enabled_kinds": [', '"enabled_kinds": [\n    "subagent",', "platform field enabled_kinds changed"),
    ('"completion_review": true,', '"completion_review": true,\n        "max_iterations": 9,',
     "locked address control.standard.params.max_iterations changed"),
])
def test_platform_and_locked_edits_never_reach_replay(ctx: DraftContext, old: str, new: str,
                                                      violation: str) -> None:
    assert old in H0_MANIFEST
    d = draft(ctx, proposer=_scripted_change(old, new))
    assert d.gate == "no_proposal" and d.payload is None
    assert violation in d.detail and "touch violation" in d.detail


def test_manifest_error_after_the_critic(ctx: DraftContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proposer_mod, "validate_candidate", lambda *a, **k: [])
    old, new = '"completion_review": true,', '"completion_review": true,\n        "max_iterations": 9,'
    d = draft(ctx, proposer=_scripted_change(old, new))
    assert d.gate == "critic_reject" and d.payload is None
    assert "manifest error: locked address control.standard.params.max_iterations changed" in d.detail
    assert d.review is not None and d.review["stage"] == "manifest"


def test_reserved_slot_lands_on_an_untried_kind(ctx: DraftContext) -> None:
    tight = stalled(ctx, ("output_plumbing", "memory"))
    d = draft(tight, "B")
    assert d.live
    assert d.edits[0]["component"] == "output_plumbing" and d.edits[0]["targets_mode"] == "exploration"
    assert d.set_addresses == ["output.parse.params.signal_detector"]
    output = materialize(d.payload or {}).manifest.component("output.parse")
    assert output.params["signal_detector"] == "hybrid"
    assert [e["component"] for e in d.edits[1:]] == ["skill", "skill"]
    skill = draft(stalled(ctx, ("skill", "memory")), "B")
    assert skill.live and {e["component"] for e in skill.edits} == {"skill"}
    a = draft(tight, "A")  # A holds no reserved slot: unchanged behaviour
    assert a.live and {e["component"] for e in a.edits} == {"prompt"}


def test_reserved_slot_judged_by_touched_addresses(ctx: DraftContext) -> None:
    new = '"extra_blocks": ["When you compare options, present them as a markdown table."]'
    mislabelled = Scripted([{"action": "edit_file", "path": "manifest.json", "old": '"extra_blocks": []',
                             "new": new},
                            {"action": "done", "summary": "s", "edits": [edit(component="skill")]}])
    d = draft(stalled(ctx, ("skill",)), "B", proposer=mislabelled)
    assert d.gate == "critic_reject" and RESERVED_REASON in d.detail
    assert d.edits[0]["component"] == "prompt" and d.edits[0]["declared_component"] == "skill"
    repair = mislabelled.requests[-1].messages[0]["content"]
    assert "REPAIR:" in repair and RESERVED_REASON in repair and "your_declared_edits" in repair


def test_smoke_fail(ctx: DraftContext, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: Any, **_k: Any) -> None:
        raise ManifestError("component 'prompt.system' cannot start")

    monkeypatch.setattr(draft_mod, "instantiate", boom)
    d = draft(ctx, "A")
    assert d.gate == "smoke_fail" and d.detail == "ManifestError: component 'prompt.system' cannot start"
    assert d.payload is None and d.edits and d.review is not None and d.review["verdict"] == "accept"


def test_never_done_is_no_proposal(ctx: DraftContext) -> None:
    d = draft(ctx, proposer=Scripted([{"action": "list_files"}]))
    assert d.gate == "no_proposal" and d.detail.startswith("max_turns:")
    assert d.usage["proposer"]["calls"] == 40 and d.usage["critic"]["calls"] == 0


def test_nothing_changed_is_no_proposal(ctx: DraftContext) -> None:
    d = draft(ctx, proposer=Scripted([{"action": "done", "summary": "nothing to do", "edits": []}]))
    assert (d.gate, d.detail) == ("no_proposal", "the proposer changed nothing")


def test_other_exceptions_are_no_proposal(ctx: DraftContext) -> None:
    def broken(_request: ModelRequest) -> str:
        raise RuntimeError("socket closed")

    d = draft(ctx, proposer=Scripted([broken]))
    assert (d.gate, d.detail) == ("no_proposal", "RuntimeError: socket closed")
    assert d.usage["proposer"]["calls"] == 1


def test_sim_analyst_finds_the_demo_modes(ctx: DraftContext) -> None:
    modes = [(m["mode"], len(m["worlds"])) for m in ctx.analysis["failure_modes"]]
    assert modes == [("missing-table", 2), ("missing-one_line_reco", 2)]


def test_json_round_trips(ctx: DraftContext, worlds: list[TurnWorld]) -> None:
    back = DraftContext.from_json(json.loads(json.dumps(ctx.to_json())))
    assert back.to_json() == ctx.to_json()
    assert back.incumbent.version == ctx.incumbent.version and back.views[0].world.id == ctx.views[0].world.id
    d = draft(ctx, "A")
    again = Draft.from_json(json.loads(json.dumps(d.to_json())))
    assert again == d
    with pytest.raises(ValueError, match="not stored"):
        DraftContext.from_json({**ctx.to_json(), "worlds": []})


def test_budget_and_enabled_kinds_reach_the_proposer(ctx: DraftContext) -> None:
    one = dataclasses.replace(ctx, b_t=1)
    d = draft(one, "A")
    assert d.live and [e["targets_mode"] for e in d.edits] == ["missing-table"]
    assert tuple(one.enabled) == K_ENABLED_PRODUCTION


@pytest.mark.parametrize(("kind", "address"), [
    ("output_plumbing", "output.parse.params.signal_detector"),
    ("control_flow", "control.standard.params.turn_budget_soft"),
    ("context_mgmt", "context.standard.params.guard_extra"),
])
def test_reserved_param_levers_are_exercised_by_replay(ctx: DraftContext, kind: str, address: str) -> None:
    d = draft(stalled(ctx, (kind,)), "B")
    assert d.live and d.edits[0]["component"] == kind and d.set_addresses == [address]
    harness = materialize(d.payload or {})
    for v in ctx.views:
        replayed = view_of(v.world, harness)
        assert address in (replayed.row or {})["result"]["replay"]["params_read"]
        assert replayed.mean == 1.0


def test_failed_repair_keeps_the_reviewed_candidate(ctx: DraftContext) -> None:
    new = '"extra_blocks": ["When you compare options, present them as a markdown table."]'
    proposer = Scripted([
        {"action": "edit_file", "path": "manifest.json", "old": '"extra_blocks": []', "new": new},
        {"action": "done", "summary": "s", "edits": [edit()]},
        {"action": "edit_file", "path": "manifest.json", "old": '"name": "h0"', "new": '"name": "h9"'},
        {"action": "abort"},
    ])
    critic = Scripted([{"verdict": "reject", "reasons": ["too vague"], "risk_notes": []}])
    d = draft(ctx, proposer=proposer, critic=critic)
    assert (d.gate, d.detail) == ("critic_reject", "['too vague']")
    assert "markdown table" in d.diff and "h9" not in d.diff
    assert len(critic.requests) == 1 and "REPAIR:" in proposer.requests[-1].messages[0]["content"]
