"""The run's state machine as data: every outcome a step can return has exactly one transition
(``rsi_worker/consolidate/flow.py``)."""

from __future__ import annotations

import pytest

from rsi_worker.consolidate import flow
from rsi_worker.consolidate.context import RoundContext
from rsi_worker.consolidate.evaluate import TrialSlot
from rsi_worker.consolidate.outcome import Next


def ctx(phase: str) -> RoundContext:
    return RoundContext(run_id="run_1", agent_id="shop", fence=1, token="t", io_id="io", phase=phase)


@pytest.mark.parametrize(("kind", "phase", "members", "then"), [
    ("trials", "incumbent", "trials", "after_incumbent"),
    ("drafts", "drafting", "drafts", "judge_round"),
])
def test_each_outcome_leads_to_one_fan_out_and_one_step(kind: str, phase: str, members: str | None,
                                                        then: str) -> None:
    edge = flow.edge(Next(kind, ctx(phase)))  # type: ignore[arg-type]
    assert edge == flow.Edge(members, then)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["final", "stop"])
def test_final_and_stop_end_the_steps(kind: str) -> None:
    assert flow.edge(Next(kind, ctx("candidates"))) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "phase"), [("drafts", "incumbent"), ("trials", "candidates"),
                                           ("trials", "open")])
def test_an_outcome_the_table_does_not_know_is_refused(kind: str, phase: str) -> None:
    with pytest.raises(ValueError, match=f"no transition from '{kind}' in phase '{phase}'"):
        flow.edge(Next(kind, ctx(phase)))  # type: ignore[arg-type]


def test_the_table_names_only_declared_steps_and_members() -> None:
    assert {e.then for e in flow.TRANSITIONS.values()} | {"open"} == set(flow.STEPS)
    assert {e.members for e in flow.TRANSITIONS.values()} - {None} == set(flow.MEMBERS)
    assert set(flow.ACCEPTS) <= set(flow.STEPS)


def test_items_are_the_slots_or_the_variants() -> None:
    slot = TrialSlot("incumbent", "w1", 0)
    nxt = Next("trials", ctx("incumbent"), slots=[slot], variants=["A"])
    assert flow.items(nxt, "trials") == [slot]
    assert flow.items(nxt, "drafts") == ["A"]


def test_a_passed_draft_names_its_trials_as_follow_ons() -> None:
    slot = TrialSlot("A", "w1", 0, "replay")
    assert flow.FOLLOWS == {"drafts": "trials"}
    assert flow.follow_on("drafts", {"variant": "A", "slots": [slot.to_json()]}) == [slot]
    assert flow.follow_on("drafts", {"variant": "B", "gate": "critic_rejected"}) == []
    assert flow.follow_on("trials", {"slots": [slot.to_json()]}) == []  # trials have no follow-ons
    assert set(flow.FOLLOWS.values()) <= set(flow.MEMBERS)
