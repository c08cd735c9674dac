"""docs/formats.md#sim-2-traits: each trait's triggers, transform and detector; detectors reject near
misses."""

from __future__ import annotations

import pytest

from rsi_common.llm.sim import (
    DETECTORS,
    TRAITS,
    detect_brief,
    detect_bullets,
    detect_cite,
    detect_korean,
    detect_one_line_reco,
    detect_table,
    detect_units,
    detected_traits,
)
from rsi_common.llm.sim.traits import (
    Answer,
    apply_traits,
    facts_from_input,
    facts_from_text,
    render,
    traits_in,
)

FACTS = [("Basic", "10 USD"), ("Pro", "25 USD"), ("Team", "40 USD")]


def answer(*traits: str, tools: list[str] | None = None) -> str:
    return render(apply_traits(Answer(facts=list(FACTS), tools_used=tools or []), list(traits)))


def test_catalog_order() -> None:
    assert TRAITS == ("table", "one_line_reco", "bullets", "brief", "units", "cite", "korean")
    assert set(DETECTORS) == set(TRAITS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Show it as a TABLE", ["table"]),
        ("use markdown tables", ["table"]),
        ("a suitable answer", []),
        ("keep the recommendation to one line", ["one_line_reco"]),
        ("a one-line recommendation", ["one_line_reco"]),
        ("on a single line", ["one_line_reco"]),
        ("use bullet points", ["bullets"]),
        ("Bullets please", ["bullets"]),
        ("be brief", ["brief"]),
        ("be concise", ["brief"]),
        ("keep it short", ["brief"]),
        ("always give units", ["units"]),
        ("our community", []),
        ("cite your tools", ["cite"]),
        ("name the source", ["cite"]),
        ("reply in Korean", ["korean"]),
        ("한국어로 답해 주세요", ["korean"]),
        ("a short table with units and sources", ["table", "brief", "units", "cite"]),
        ("", []),
    ],
)
def test_triggers(text: str, expected: list[str]) -> None:
    assert traits_in(text) == expected


def test_language_of_request_trigger_needs_hangul_in_request() -> None:
    text = "Answer in the language of the request."
    assert traits_in(text, request="요금제를 비교해 주세요") == ["korean"]
    assert traits_in(text, request="compare the plans") == []


def test_base_answer_layout_and_no_trait_detected() -> None:
    text = answer()
    assert text.splitlines() == [
        "Sure — here is what I found.",
        "Basic: 10",
        "Pro: 25",
        "Team: 40",
        "Recommendation: Basic",
        "because it comes first.",
    ]
    assert detected_traits(text) == []


@pytest.mark.parametrize("trait", TRAITS)
def test_each_transform_is_detected_alone(trait: str) -> None:
    text = answer(trait)
    assert DETECTORS[trait](text), text
    # and only that trait (brief keeps ≤ 5 lines; nothing else leaks in)
    assert detected_traits(text) == [trait], text


def test_traits_compose() -> None:
    all_but_bullets = [t for t in TRAITS if t != "bullets"]
    text = answer(*all_but_bullets, tools=["plans"])
    assert detected_traits(text) == all_but_bullets, text
    assert len([ln for ln in text.splitlines() if ln.strip()]) <= 5
    # table and bullets both render (brief could not keep both within 5 lines)
    text = answer("table", "bullets", "one_line_reco", "units", "cite", "korean")
    assert detected_traits(text) == ["table", "one_line_reco", "bullets", "units", "cite", "korean"], text


def test_table_transform() -> None:
    lines = answer("table").splitlines()
    assert lines[1:6] == ["| item | value |", "|---|---|", "| Basic | 10 |", "| Pro | 25 |", "| Team | 40 |"]


def test_one_line_and_bullets_transforms() -> None:
    assert answer("one_line_reco").splitlines()[-1] == "Recommendation: Basic — because it comes first."
    assert "- Pro: 25" in answer("bullets").splitlines()


def test_units_keep_and_gain() -> None:
    assert "Basic: 10 USD" in answer("units")
    gained = Answer(facts=[("distance", "12")], hints={"12": "km"})
    assert "distance: 12 km" in render(apply_traits(gained, ["units"]))
    assert "distance: 12\n" in render(Answer(facts=[("distance", "12")], hints={"12": "km"}))


def test_cite_names_tools_or_the_request() -> None:
    assert answer("cite", tools=["plans", "prices"]).splitlines()[-1] == "Sources: plans, prices"
    assert answer("cite").splitlines()[-1] == "Sources: the request"


def test_korean_labels() -> None:
    text = answer("korean", "one_line_reco", "cite")
    assert text.splitlines()[0] == "네 — 찾은 내용은 다음과 같습니다."
    assert "추천: Basic" in text and "출처:" in text
    assert detect_one_line_reco(text) and detect_cite(text) and detect_korean(text)


def test_brief_drops_reason_then_rows() -> None:
    text = answer("brief", "table", "cite")
    lines = text.splitlines()
    assert len(lines) == 5 and lines[0] == "| item | value |"
    assert "because it comes first." not in text
    assert detect_brief(text) and detect_table(text) and detect_cite(text)


# --- detectors: positives and near misses -------------------------------------------------------


def test_detect_table_near_misses() -> None:
    assert detect_table("| a | b |\n|---|---|\n| 1 | 2 |")
    assert not detect_table("| a | b |\n| 1 | 2 |")  # no separator
    assert not detect_table("|---|---|")  # separator only
    assert not detect_table("| a |\n|---|")  # one cell
    assert not detect_table("a | b\n---|---")  # not delimited by pipes


def test_detect_one_line_reco_near_misses() -> None:
    assert detect_one_line_reco("x: 1\nRecommendation: x, it is first.")
    assert detect_one_line_reco("Recommendation: x\nSources: plans")
    assert not detect_one_line_reco("Recommendation: x\nbecause it comes first.")
    assert not detect_one_line_reco("Recommendation: x\nRecommendation: y")
    assert not detect_one_line_reco("Recommendation:\nx")
    assert not detect_one_line_reco("We recommend x.")


def test_detect_bullets_near_misses() -> None:
    assert detect_bullets("- a\n- b")
    assert not detect_bullets("- a\nb")
    assert not detect_bullets("-a\n-b")
    assert not detect_bullets("* a\n* b")


def test_detect_brief_near_misses() -> None:
    assert detect_brief("a: 1\nb: 2\nRecommendation: a")
    assert not detect_brief("Sure — here is what I found.\na: 1")
    assert not detect_brief("Here are the plans:\na: 1")
    assert not detect_brief("\n".join(f"k{i}: {i}" for i in range(6)))
    assert not detect_brief("")


def test_detect_units_near_misses() -> None:
    assert detect_units("distance: 12 km\nshare: 30%\nprice: $5")
    assert detect_units("| d | 12km |\n|---|---|")
    assert not detect_units("distance: 12 km\nprice: 5")
    assert not detect_units("distance: 12")
    assert not detect_units("name: Seoul")  # no number at all
    assert detect_units("date: 2024-01-05\nprice: 5 USD")  # date-like numbers are skipped


def test_detect_cite_and_korean_near_misses() -> None:
    assert detect_cite("a\nSources: plans")
    assert not detect_cite("source: plans")
    assert not detect_cite("See Sources: plans")
    assert detect_korean("추천: A")
    assert not detect_korean("Recommendation: A")


# --- facts ----------------------------------------------------------------------------------


def test_facts_from_text() -> None:
    text = "price: 10 USD\nnot a fact\nurl: https://x.y\nRecommendation: A\n- speed: 3 ms\nhttp://a.b"
    assert facts_from_text(text) == [("price", "10 USD"), ("url", "https://x.y"), ("speed", "3 ms")]


def test_facts_from_input() -> None:
    assert facts_from_input("Compare these plans: Basic 10 USD, Pro 25 USD.") == [
        ("Basic", "10 USD"),
        ("Pro", "25 USD"),
    ]
    assert facts_from_input("Pick one: red, green") == [("red", ""), ("green", "")]
    assert facts_from_input("Rank:\nspeed: fast\ncost=low") == [("speed", "fast"), ("cost", "low")]
    assert facts_from_input("hello there") == [("hello there", "")]
    assert facts_from_input("  ") == []
