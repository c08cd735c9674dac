"""TurnWorld, text_of, previous_in_conversation, new_world_id (docs/formats.md §4.1)."""

from __future__ import annotations

import re

from rsi_common.world import WORLD_SCHEMA, TurnWorld, new_world_id, previous_in_conversation, text_of

from .helpers import golden


def test_text_of() -> None:
    assert text_of("plain") == "plain"
    assert text_of({"type": "text", "text": "t"}) == "t"
    assert text_of({"text": "no type"}) == "no type"
    assert text_of({"type": "thinking", "text": "hidden"}) == ""
    assert text_of({"role": "user", "content": [{"type": "text", "text": "a"}]}) == "a"
    blocks = [
        {"type": "text", "text": "one"},
        {"type": "tool_use", "id": "t", "name": "x", "input": {}},
        {"type": "tool_result", "tool_use_id": "t", "content": "res"},
        {"type": "thinking", "thinking": "hm"},
        {"type": "text", "text": ""},
        "two",
        {"content": "three"},
    ]
    assert text_of(blocks) == "one\ntwo\nthree"
    assert text_of(None) == "" and text_of(3) == "" and text_of({"type": "image"}) == ""


def test_properties_from_the_golden() -> None:
    data = golden()
    w = TurnWorld("w_" + "a" * 24, data, signals={"stars": 2}, interaction_id="conv_4b1d22", seq=2)
    assert w.replayable
    assert w.request == "How did EMEA sales in Q3 2024 compare with Q3 2023?"
    assert w.answer.startswith("EMEA sales in Q3 2024 were 4.66 M")
    assert len(w.history) == 2 and len(w.tool_calls) == 2
    assert w.clock == 1741944413.0 and w.model == "claude-sonnet-4-5"
    assert w.harness_version is not None and w.harness_version.startswith("sha256:")
    assert w.preview() == w.request
    assert w.preview(10) == "How did E…" and len(w.preview(10)) == 10


def test_replayable_rules() -> None:
    data = golden()
    assert not TurnWorld("w", dict(data, replayable=False)).replayable
    assert not TurnWorld("w", dict(data, schema="rsi-world/0")).replayable
    assert not TurnWorld("w", dict(data, plan={})).replayable
    no_flag = dict(data)
    del no_flag["replayable"]
    assert TurnWorld("w", no_flag).replayable and no_flag["schema"] == WORLD_SCHEMA


def test_defensive_on_empty_data() -> None:
    w = TurnWorld("w", {})
    assert (w.request, w.answer, w.history, w.tool_calls, w.clock, w.model) == ("", "", [], [], 0.0, None)
    assert not w.replayable


def test_previous_in_conversation() -> None:
    def mk(i: str, conv: str, seq: int, clock: float = 0.0) -> TurnWorld:
        return TurnWorld(i, {"clock": clock, "interaction_id": conv}, interaction_id=conv, seq=seq)

    a1, a2, a3 = mk("a1", "A", 1), mk("a2", "A", 2), mk("a3", "A", 3)
    b1 = mk("b1", "B", 1)
    worlds = [a3, b1, a1, a2]
    assert previous_in_conversation(worlds, a3) is a2
    assert previous_in_conversation(worlds, a1) is None
    assert previous_in_conversation(worlds, b1) is None
    assert previous_in_conversation(worlds, mk("x", "", 5)) is None
    # unknown seq: the clock orders
    c1, c2 = mk("c1", "C", 0, 10.0), mk("c2", "C", 0, 20.0)
    assert previous_in_conversation([c1, c2], c2) is c1
    # the conversation key falls back to the record's interaction_id
    d1 = TurnWorld("d1", {"interaction_id": "D"}, seq=1)
    d2 = TurnWorld("d2", {"interaction_id": "D"}, seq=2)
    assert previous_in_conversation([d1, d2], d2) is d1


def test_new_world_id() -> None:
    ids = {new_world_id() for _ in range(50)}
    assert len(ids) == 50 and all(re.fullmatch(r"w_[0-9a-f]{24}", i) for i in ids)
