"""``rsi bench efficacy`` arithmetic and classification on synthetic histories, and the pool's texts
against the sim model's readers (docs/benchmarks/efficacy.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from rsi_common.llm import ModelRequest
from rsi_common.llm.sim.core import message_text
from rsi_common.llm.sim.roles import read_signal
from rsi_common.llm.sim.traits import (
    TRAITS,
    Answer,
    apply_traits,
    facts_from_input,
    has_hangul,
    render,
    traits_in,
)
from rsi_worker.bench.efficacy import REQUIRED, levels, noise_label, targets
from rsi_worker.bench.efficacy_metrics import (
    H0,
    AdoptionRecord,
    AgentHistory,
    classify,
    harm,
    is_noop,
    level_summary,
    pass_rate,
    surface_units,
    tokens_per_adoption,
    turn_passes,
    usage_tokens,
)
from rsi_worker.bench.efficacy_noop import NoopProposer, duplicate_block, merge
from rsi_worker.bench.efficacy_platform import has_trait
from rsi_worker.bench.efficacy_pool import CHANGES, FRAGMENTS, LEARN_PREFS, AgentSpec, build_pool
from rsi_worker.gate.untrusted import UntrustedIndex
from rsi_worker.roles.sim.proposer import TRAIT_TEXT

BASE = "You are a planning assistant.\n\nAnswer with the facts and recommend one option."
TABLE = "When you compare options, present them as a markdown table."
CITE = "End with a line 'Sources:' that names the tools whose results you used."
STATS = {"runs": 10, "rounds": 3, "statuses": {"recorded": 7, "adopted": 3}, "role_tokens": 9000,
         "replay_tokens": 1000}


# --- no-op ----------------------------------------------------------------------------------------


def test_surface_units_are_normalised_lines_and_sentences() -> None:
    text = "# Skills\n- Keep   it SHORT. Use a table!\n\n  1. cite  sources"
    assert surface_units(text) == ["skills", "keep it short.", "use a table!", "cite sources"]


@pytest.mark.parametrize("child, noop", [
    (f"{BASE}\n\n{TABLE}\n\n{TABLE}", True),                              # exact duplicate block
    (f"{BASE}\n\n{TABLE.upper().replace(' ', '  ')}\n\n{TABLE}", True),   # normalised copy, placed first
    (f"{TABLE}\n\n{BASE}", True),                                         # re-ordered identical text
    (f"{BASE}\n\n{TABLE}", True),                                         # unchanged surface (params only)
    (f"{BASE}\n\n{TABLE}\n\n{CITE}", False),                              # a new instruction
    (f"{BASE}\n\n{TABLE} {CITE}", False),                                 # a new sentence in the same line
    (BASE, False),                                                        # shorter: a simplification
])
def test_is_noop(child: str, noop: bool) -> None:
    assert is_noop(f"{BASE}\n\n{TABLE}", child) is noop


def test_duplicate_block_variants_add_nothing() -> None:
    text = json.dumps(manifest_with(TABLE), indent=2)
    a = json.loads(duplicate_block(text, "A") or "")
    b = json.loads(duplicate_block(text, "B") or "")
    assert a["components"][0]["params"]["extra_blocks"] == [TABLE, TABLE]
    first, second = b["components"][0]["params"]["extra_blocks"]
    assert second == TABLE and first["text"] != TABLE
    assert surface_units(first["text"]) == surface_units(TABLE)
    empty = {"components": [{"id": "p", "kind": "prompt", "params": {"extra_blocks": []}}]}
    assert duplicate_block(json.dumps(empty), "A") is None


def manifest_with(*blocks: str) -> dict[str, Any]:
    prompt = {"id": "prompt.system", "kind": "prompt", "params": {"extra_blocks": list(blocks)}}
    return {"components": [prompt]}


def _proposer_turn(proposer: NoopProposer, messages: list[dict[str, Any]]) -> dict[str, Any]:
    reply = proposer.complete(ModelRequest(model="noop", system="s", messages=messages))
    return dict(json.loads(message_text({"content": reply.content})))


def exchange(action: dict[str, Any], result: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": json.dumps(action)}, {"role": "user", "content": result}]


def test_noop_proposer_reads_duplicates_and_declares_one_prompt_edit() -> None:
    manifest = json.dumps(manifest_with(TABLE), indent=2)
    p = NoopProposer()
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "VARIANT:\nYou draft variant B of round 1."}]
    first = _proposer_turn(p, msgs)
    assert first == {"action": "read_file", "path": "manifest.json"}
    msgs += exchange(first, "[read_file] ok\n" + manifest)
    second = _proposer_turn(p, msgs)
    assert second["action"] == "edit_file" and second["old"] == manifest
    assert second["new"] == duplicate_block(manifest, "B")
    msgs += exchange(second, "[edit_file] ok")
    done = _proposer_turn(p, msgs)
    assert done["action"] == "done" and [e["addresses"] for e in done["edits"]] == [
        ["prompt.system.params.extra_blocks"]]
    msgs += exchange(done, "[done] error: no")
    assert _proposer_turn(p, msgs) == {"action": "abort"}


# --- held-out rates -------------------------------------------------------------------------------


def test_turn_passes_and_pass_rate() -> None:
    by_trait = {"table": [True, True, False, True], "cite": [True, False, False, True]}
    assert turn_passes(by_trait, ["table", "cite"]) == [True, False, False, True]
    assert turn_passes(by_trait, ["table"]) == [True, True, False, True]
    assert turn_passes(by_trait, []) == []
    assert pass_rate([True, False, False, True]) == 0.5
    assert pass_rate([]) is None


def hist(kind: str, traits: Sequence[str], adoptions: Sequence[AdoptionRecord],
         heldout: Mapping[str, Mapping[str, Sequence[bool]]], final: str,
         answers: Mapping[str, Sequence[str]] | None = None, agent: str = "a") -> AgentHistory:
    return AgentHistory(agent, kind, tuple(traits), tuple(adoptions), heldout, final, answers or {})


NONE = [False] * 4
ALL = [True] * 4


def test_level_summary_pass_rates_and_required_keys() -> None:
    learner = hist("learn", ["table"], [AdoptionRecord("r1", H0, "v1", False)],
                   {H0: {"table": NONE}, "v1": {"table": [True, True, True, False]}}, "v1")
    pair = hist("learn", ["table", "cite"], [AdoptionRecord("r2", H0, "v2", False)],
                {H0: {"table": NONE, "cite": NONE}, "v2": {"table": ALL, "cite": [True, False, True, True]}},
                "v2", agent="b")
    control = hist("accept", [], [], {H0: {}}, H0, agent="c")
    out = level_summary([learner, pair, control], STATS)
    assert list(out)[:6] == list(REQUIRED)
    assert out["heldout_h0"] == 0.0 and out["heldout_final"] == 0.75 and out["heldout_gain"] == 0.75
    assert (out["adoptions"], out["false_adoptions"], out["harmful_adoptions"]) == (2, 0, 0)
    assert out["tokens_per_adoption"] == 5000.0
    assert (out["agents"], out["learning_agents"], out["heldout_turns"]) == (3, 2, 8)
    assert out["by_kind"]["accept"] == {"agents": 1, "adoptions": 0, "heldout_h0": None,
                                        "heldout_final": None}


# --- false and harmful ----------------------------------------------------------------------------


def test_any_adoption_on_an_acceptance_control_is_false() -> None:
    h = hist("accept", [], [AdoptionRecord("r1", H0, "v1", False)], {H0: {}, "v1": {}}, "v1")
    [v] = classify(h)
    assert v.false == "adoption on an acceptance control" and v.harmful is None


def test_repeated_correction_counts_adoptions_after_the_first() -> None:
    heldout = {H0: {"table": NONE}, "v1": {"table": ALL}, "v2": {"table": ALL}}
    adoptions = [AdoptionRecord("r1", H0, "v1", False), AdoptionRecord("r2", "v1", "v2", False)]
    h = hist("repeat", ["table"], adoptions, heldout, "v2")
    first, second = classify(h)
    assert first.false is None
    assert second.false == "adoption after the first learning of a repeated correction"
    assert second.index == 2


def test_noop_diff_is_false_for_any_agent() -> None:
    adoptions = [AdoptionRecord("r1", H0, "v1", False), AdoptionRecord("r2", "v1", "v2", True)]
    h = hist("learn", ["table"], adoptions,
             {H0: {"table": NONE}, "v1": {"table": ALL}, "v2": {"table": ALL}}, "v2",
             answers={H0: ["x"], "v1": ["y"], "v2": ["y"]})
    first, second = classify(h)
    assert first.false is None and not first.unchanged
    assert second.false is not None and "no-op diff" in second.false and second.unchanged


def test_harmful_when_a_learned_trait_is_lost_on_a_turn_it_passed() -> None:
    heldout = {H0: {"table": NONE, "cite": NONE},
               "v1": {"table": [True, True, False, True], "cite": NONE},
               "v2": {"table": [True, False, False, True], "cite": ALL}}
    h = hist("change", ["table", "cite"],
             [AdoptionRecord("r1", H0, "v1", False), AdoptionRecord("r2", "v1", "v2", False)], heldout, "v2")
    first, second = classify(h)
    assert first.harmful is None and first.false is None
    assert second.harmful == "lost table on 1 of 4 held-out turns" and second.false is None
    assert level_summary([h], STATS)["harmful_adoptions"] == 1


def test_not_harmful_when_the_trait_was_never_learned_or_fails_on_the_same_turns() -> None:
    assert harm({"table": NONE}, {"table": NONE}, ["table"]) is None
    same = [True, False, True, False]
    assert harm({"table": same}, {"table": same, "cite": ALL}, ["table", "cite"]) is None
    assert harm({"table": [True, False]}, {"table": [True, True]}, ["table"]) is None


# --- tokens ---------------------------------------------------------------------------------------


def test_usage_tokens_sums_roles_but_not_policy() -> None:
    usage = {"judge": {"calls": 4, "input_tokens": 100, "output_tokens": 20},
             "proposer": {"calls": 2, "input_tokens": 1000, "output_tokens": 300},
             "policy": {"calls": 9, "input_tokens": 5000, "output_tokens": 500}}
    assert usage_tokens(usage) == 1420
    assert usage_tokens(None) == 0


def test_tokens_per_adoption() -> None:
    assert tokens_per_adoption(9000, 1000, 4) == 2500.0
    assert tokens_per_adoption(9000, 1000, 0) is None


def test_noop_merge_and_targets() -> None:
    parts = [{"runs": 3, "adoptions": 1, "setup_failed": 0, "no_drop": 1,
              "statuses": {"adopted": 1, "kept": 2}, "outcomes": {"ACCEPTED": 1}},
             {"runs": 2, "adoptions": 0, "setup_failed": 1, "no_drop": 0,
              "statuses": {"kept": 2}, "outcomes": {}}]
    out = merge(parts, 0.25)
    assert (out["runs"], out["adoptions"], out["adoption_rate"]) == (5, 1, 0.2)
    assert out["statuses"] == {"adopted": 1, "kept": 4}
    level = {"false_adoptions": 0, "harmful_adoptions": 1, "heldout_gain": 0.9}
    report = {noise_label(0.0): level, noise_label(0.1): level, "noop_adoption_rate": 0.005, "config": {}}
    assert levels(report) == ["0", "0.1"]
    assert targets(report) == {"0: false_adoptions == 0": True, "0: harmful_adoptions == 0": False,
                               "0: heldout gain >= 0.8": True, "0.1: false_adoptions == 0": True,
                               "0.1: harmful_adoptions == 0": False, "noop adoption rate <= 1%": True}


# --- the pool -------------------------------------------------------------------------------------


POOL = build_pool(60, 7)


def test_pool_covers_every_trait_pairs_korean_and_every_kind() -> None:
    small = build_pool(30, 0)
    assert {t for a in small for t in a.traits} == set(TRAITS)
    assert {a.kind for a in small} == {"learn", "repeat", "change", "accept"}
    assert any(len(a.first) == 2 for a in small) and any(a.language == "ko" for a in small)
    assert build_pool(30, 0) == small  # seeded


def test_requests_name_no_trait_and_heldout_is_never_live() -> None:
    for a in POOL:
        assert not set(a.live) & set(a.heldout)
        for text in a.live + a.heldout:
            assert traits_in(text, request=text) == [], text
            assert has_hangul(text) is (a.language == "ko")


def test_h0_answers_have_no_trait_and_every_preference_is_observable() -> None:
    for a in POOL:
        for text in a.heldout:
            if "lookup" in text:
                continue  # facts come from the tool result (end-to-end test)
            facts = facts_from_input(text)
            base = render(Answer(facts=facts))
            assert not any(has_trait(text, base, t) for t in TRAITS), (text, base)
            full = render(apply_traits(Answer(facts=facts), list(a.traits)))
            assert all(has_trait(text, full, t) for t in a.traits), (a.id, full)


@pytest.mark.parametrize("spec", POOL, ids=lambda s: s.id)
def test_corrections_are_read_as_corrections_naming_exactly_their_traits(spec: AgentSpec) -> None:
    for turn in range(6):
        assert read_signal(spec.acceptance(turn))["kind"] == "accept"
        assert traits_in(spec.acceptance(turn)) == []
        for traits in {spec.first, spec.traits} - {()}:
            signal = read_signal(spec.correction(traits, turn))
            assert signal["kind"] in ("correction", "complaint")
            assert traits_in(signal["criterion"], request=spec.live[0]) == sorted(traits, key=TRAITS.index)


def test_wordings_vary_and_some_repeat_the_proposers_own_words() -> None:
    """Users write naturally: at least one wording shares six words with the sim proposer's instruction
    text, so the pool exercises the gate's copied-text rule and the proposer's rewording repair."""
    for language, by_trait in FRAGMENTS.items():
        assert all(len(set(v)) >= 3 for v in by_trait.values()), language
    texts = {a.correction((t,), turn) for a in POOL for t in a.traits for turn in range(6)}
    index = UntrustedIndex(sorted(texts))
    assert any(index.shared_span(text) is not None for text in TRAIT_TEXT.values())


def test_pairs_are_compatible() -> None:
    facts = facts_from_input("Compare: Alpha 10 EUR, Beta 20 EUR, Gamma 30 EUR")
    for pair in [p for p in LEARN_PREFS if len(p) == 2] + [a + b for a, b in CHANGES]:
        answer = render(apply_traits(Answer(facts=facts), list(pair)))
        assert all(has_trait("x", answer, t) for t in pair), pair
