"""The sim model's analyst, proposer and critic (docs/formats.md#sim-4-the-roles) reading the prompts of
rsi_worker.roles."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rsi_common.config import SimConfig
from rsi_common.harness import diff_trees, h0, workspace_of
from rsi_common.llm import ModelRequest
from rsi_common.llm.sim import SIM_ROLES, SimClient
from rsi_common.math import Exploration
from rsi_common.world import TurnWorld
from rsi_worker.consolidate.draft import DraftContext
from rsi_worker.roles.analyst import analyst_user_prompt, analyze
from rsi_worker.roles.critic import critic_user_prompt, recent_user_messages
from rsi_worker.roles.proposer import proposer_user
from rsi_worker.roles.sim.analyst import analyze_prompt
from rsi_worker.roles.sim.critic import review_payload, user_clauses
from tests.unit.roles.helpers import CORRECTION

H0_WS = workspace_of(h0())


def test_default_table_has_the_consolidation_roles() -> None:
    assert {"analyst", "proposer", "critic"} <= set(SIM_ROLES)


# --- analyst ------------------------------------------------------------------------------------


def test_analyst_on_rendered_views(ctx: DraftContext) -> None:
    report = analyze(SimClient("sim-1", role="analyst"), ctx.views, {})
    modes = report["failure_modes"]
    assert [m["mode"] for m in modes] == ["missing-table", "missing-one_line_reco"]
    failing = sorted(v.world.id for v in ctx.views if v.mean < 1)
    assert all(sorted(m["worlds"]) == failing and m["lens"] == "format" for m in modes)
    assert all(CORRECTION not in json.dumps(m) for m in modes)
    passing = [v.world.id for v in ctx.views if v.mean == 1]
    assert all(h["worlds"] == passing and h["habit"].startswith("has-") for h in report["success_habits"])


def _world(wid: str, answer: str, judge: list[str]) -> str:
    return "\n".join([f"WORLD {wid} — one past turn of this agent (trial: replay)",
                      "REQUEST", "Compare: a, b",
                      "[step 1] AGENT: thinking", "FINAL ANSWER", answer, "JUDGE", *judge])


def test_analyst_ranks_by_worlds_explained() -> None:
    plain = "Sure — here is what I found.\na: 1\nb: 2\nRecommendation: a\nbecause it comes first."
    bullets = "[FAIL] (user_1) Write the facts as bullet points — missing trait(s): bullets"
    table = "[FAIL] (user_2) Show a table — missing trait(s): table"
    passed = "[PASS] (user_3) Use bullets — has the trait(s)"
    prompt = "\n\n".join([
        "FAILING WORLDS", _world("w1", plain, [bullets]), _world("w2", plain, [table]),
        _world("w3", plain, [table, passed]),
        "PASSING WORLDS",
        _world("w4", "- a: 1\n- b: 2\nRecommendation: a — because it comes first.", [passed]),
        "PRIOR NAMES\nfailure modes: -\nsuccess habits: -",
    ])
    report = analyze_prompt(prompt)
    assert [(m["mode"], m["worlds"]) for m in report["failure_modes"]] == [
        ("missing-table", ["w2", "w3"]), ("missing-bullets", ["w1"])]
    assert [(h["habit"], h["worlds"]) for h in report["success_habits"]] == [
        ("has-one_line_reco", ["w4"]), ("has-bullets", ["w4"]), ("has-brief", ["w4"])]
    # a trait the answer already shows is not missing, even when a criterion names it
    shown = analyze_prompt("FAILING WORLDS\n" + _world("w5", "| a | 1 |\n|---|---|", [table]))
    assert shown["failure_modes"] == []


def test_analyst_prompt_layout_is_what_the_sim_reads(ctx: DraftContext) -> None:
    prompt = analyst_user_prompt(ctx.views, {})
    assert analyze_prompt(prompt) == json.loads(
        SimClient("sim-1", role="analyst").complete(
            ModelRequest("sim-1", "", [{"role": "user", "content": prompt}])).text)


# --- critic -------------------------------------------------------------------------------------


def _review(new_ws: dict[str, str], base: dict[str, str] = H0_WS, users: tuple[str, ...] = (CORRECTION,)
            ) -> dict[str, Any]:
    payload = critic_user_prompt(diff_trees(base, new_ws), "m", "t", [{"id": "E1"}], list(users))
    return review_payload(payload)


def _manifest(edit: Any) -> dict[str, str]:
    manifest = json.loads(H0_WS["manifest.json"])
    edit(manifest)
    return {"manifest.json": json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"}


def _blocks(*texts: str) -> dict[str, str]:
    return _manifest(lambda m: m["components"][0]["params"].update(extra_blocks=list(texts)))


def test_critic_accepts_general_instructions() -> None:
    verdict = _review(_blocks("When you compare options, present them as a markdown table."))
    assert verdict["verdict"] == "accept"


def test_critic_rejects_quoted_user_text() -> None:
    quoted = 'Users like this: "show it as a table and keep the recommendation to one line".'
    verdict = _review(_blocks(quoted))
    assert verdict["verdict"] == "reject" and "quotes what a user wrote" in verdict["reasons"][0]
    assert CORRECTION not in json.dumps(verdict)
    clauses = user_clauses('- "No, show it as a table and keep it short"')
    assert clauses == ["show it as a table and keep it short"]


def test_critic_rejects_lessons_and_summaries() -> None:
    for text in ("Lessons learned: prefer tables.", "Start from the conversation summary below."):
        verdict = _review(_blocks(text))
        assert verdict["verdict"] == "reject" and "lessons or a conversation summary" in verdict["reasons"][0]


def test_critic_rejects_removing_safety_components() -> None:
    off = _manifest(lambda m: m["components"][2]["params"].update(completion_review=False))
    assert _review(off)["reasons"] == ["switches off a safety mechanism without a replacement"]
    gone = _manifest(lambda m: m["components"].pop(2))
    assert _review(gone)["reasons"] == ["removes a control_flow component without a replacement"]
    def disable_context(m: dict[str, Any]) -> None:
        m["components"][1] = {"id": "context.standard", "kind": "context_mgmt", "enabled": False,
                              "impl": m["components"][1]["impl"]}

    assert "disables a context_mgmt component without a replacement" in _review(_manifest(disable_context))[
        "reasons"]
    memory_off = _manifest(lambda m: m["components"][5].update(enabled=False))
    assert _review(memory_off)["verdict"] == "accept"


# --- proposer -----------------------------------------------------------------------------------


def _first_reply(ctx: DraftContext, variant: str = "A", index: int = 0, **cfg: Any) -> dict[str, Any]:
    client = SimClient("sim-1", SimConfig(**cfg), role="proposer")
    messages = [{"role": "user", "content": proposer_user(ctx, variant, index)}]
    request = ModelRequest("sim-1", "SYSTEM", messages)
    return dict(json.loads(client.complete(request).text))


def test_sim_proposer_reads_the_manifest_first(ctx: DraftContext) -> None:
    assert _first_reply(ctx) == {"action": "read_file", "path": "manifest.json"}


def test_sim_proposer_aborts_after_an_error(ctx: DraftContext) -> None:
    client = SimClient("sim-1", role="proposer")
    messages = [{"role": "user", "content": proposer_user(ctx, "A", 0)},
                {"role": "assistant", "content": [{"type": "text", "text": '{"action": "list_files"}'}]},
                {"role": "user", "content": "[done] error: the candidate is not valid"}]
    assert json.loads(client.complete(ModelRequest("sim-1", "", messages)).text) == {"action": "abort"}


def test_sim_proposer_leaky_reads_a_trace_first(ctx: DraftContext) -> None:
    client = SimClient("sim-1", SimConfig(leaky=True), role="proposer")
    failing = next(v.world.id for v in ctx.views if v.mean < 1)
    messages = [{"role": "user", "content": proposer_user(ctx, "A", 0)},
                {"role": "assistant", "content": [{"type": "text", "text": '{"action": "read_file", '
                                                                          '"path": "manifest.json"}'}]},
                {"role": "user", "content": "[read_file] ok\n" + H0_WS["manifest.json"]}]
    reply = json.loads(client.complete(ModelRequest("sim-1", "", messages)).text)
    assert reply == {"action": "read_trace", "task_id": failing}


def test_sim_proposer_without_skill_lever_uses_part_order(ctx: DraftContext) -> None:
    from rsi_worker.consolidate.draft import draft_candidate

    records = [{"t": 0, "variant": "B", "component": "skill", "delta_S": 0.1, "accepted": False}]
    tried = dataclasses.replace(ctx, t=1, records=records,
                                exploration=Exploration(0, ("config", "context_mgmt", "memory"), 1))
    d = draft_candidate(tried, "B", 1, proposer=SimClient("sim-1", role="proposer"),
                        critic=SimClient("sim-1", role="critic"))
    assert d.live
    params = (d.payload or {})["manifest"]["components"][0]["params"]
    assert params["part_order"] == ["habit-one_line_reco", "habit-table"]
    assert [b["id"] for b in params["extra_blocks"]] == ["habit-table", "habit-one_line_reco"]
    assert {e["component"] for e in d.edits} == {"prompt"}


def test_user_messages_are_in_the_critic_payload(worlds: list[TurnWorld]) -> None:
    text = critic_user_prompt("+x\n", "m", "t", [], recent_user_messages(worlds))
    section = text.split("RECENT USER MESSAGES:\n", 1)[1].split("\n\nDIFF:", 1)[0]
    assert "show it as a table and keep the recommendation to one line" in user_clauses(section)


def test_block_texts_trigger_exactly_their_trait() -> None:
    from rsi_common.llm.sim.traits import TRAITS, traits_in
    from rsi_worker.roles.sim.proposer import TRAIT_TEXT

    assert set(TRAIT_TEXT) == set(TRAITS)
    for trait, text in TRAIT_TEXT.items():
        assert traits_in(text, request="안녕하세요") == [trait]
        assert "lesson" not in text.lower()
