"""JSON round trips of every value type (docs/algorithm/formulas.md §2.1) and tolerant readers."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_common.kinds import KINDS
from rsi_common.math import (
    AcceptedEdit,
    AttributionRow,
    BetaDecision,
    BetaSweep,
    Calibration,
    Candidate,
    Decision,
    Edit,
    EditRecord,
    EvalResult,
    Exploration,
    GridPlan,
    GridPlanningContext,
    GridValidity,
    LiveCycle,
    ModeConfig,
    PruneTarget,
    ReplayEpisode,
    RRSIParams,
    SweepPoint,
    TaskResult,
    aggregate,
    exercised_guard,
    exploration,
)
from tests.unit.math.helpers import ev_of, tr


def _wire(x: Any) -> Any:
    """Through real JSON text, as storage does."""
    return json.loads(json.dumps(x.to_json(), ensure_ascii=False))


EDIT = Edit("E1", "skill", "cite sources", "corrective", ("w_1", 7), "fixes w_1", ("skills.library",),
            "params cannot", "when numbers", "low", "a skill", "Skill")
EV = ev_of({"w2": TaskResult((1.0, 0.5), (2, 2), (1200, None), 0, {"verdicts": [1, 0]}),
            "w1": tr([0.0], missing=1)},
           k=2, job="r3A", extra={"valid_rate": 0.5, "params_read": ["a.params.b"]})

VALUES: list[Any] = [
    TaskResult((1.0, 0.0), (1.0, 3.0), (10, None), 1, {"note": "x"}),
    TaskResult((0.25,)),
    EV,
    EDIT,
    Edit("E2"),
    EditRecord(3, "B", "E1", "memory", "h", -0.0123, 0.25, False, "REJECTED", 0.5, 1200.5, 2, "why",
               "corrective", ("w1",), True),
    EditRecord(None, "", None, None, None, None, None, False, ""),
    Decision("A", True, "admissible: gain", "admissible", 0.7, 1000.0, 0.2, 0.0, 1, ("g1",)),
    Decision("D", False, "critic_reject", "critic_reject"),
    Calibration(0.1, 2.0, 0.05, 0.04, 0.014, "repeated base evaluations", 2, 2, 10, 0.525, 1000.0,
                (0.5, 0.55), 0.05),
    Calibration(0.0625, 2.0, None, 0.0, 0.0, "bootstrap over trials of one base evaluation", 1, 2, 8, 0.75,
                None),
    AcceptedEdit(0, "C1", "h1", 0.03),
    PruneTarget("prompt", -0.01, (AcceptedEdit(0, "C1", "h1", 0.03),)),
    PruneTarget("skill", None),
    Exploration(1, ("skill", "memory"), 1),
    AttributionRow(2, "A", "E1", "h", 2, ("w1",), 0.5, ("w3",), True),
    RRSIParams(delta=0.03),
    ModeConfig.for_mode("paper"),
    ReplayEpisode("toy", 0.4, (1, 2, 0), (0.5, 0.6, 0.7), 0.4, 3, 2, 2, 6, "policy_stop",
                  ((0, 0.0), (1, 0.5), (3, 1.0))),
    ReplayEpisode("empty", 0.0, (), (), None, 0, 0, 1, 0),
    LiveCycle(3, 0.71, 0.6),
    SweepPoint(0.4, 0.5, 0.4, 0.3),
    BetaSweep(2, (SweepPoint(0.4, 0.5, 0.4, 0.3), SweepPoint(0.6, 0.6, 0.5, 0.35))),
    BetaDecision(0.55, "raise", "plateau"),
    GridPlan(10, 2, "wide"),
    GridPlanningContext(10, 19, 4, 4, 2, 10, 10, ({"plan": [4, 2], "best": 0.5},)),
    GridValidity(True, False, 130, ("out of support",)),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda x: type(x).__name__)
def test_round_trip(value: Any) -> None:
    again = type(value).from_json(_wire(value))
    assert again == value
    assert again.to_json() == value.to_json()


def test_candidate_round_trip() -> None:
    for c in (Candidate("A", (EDIT, Edit("E2", "prompt")), EV, None, "", {"manifest": {"name": "h1"}}),
              Candidate("B", (), None, "critic_reject", "leak")):
        again = Candidate.from_json(_wire(c))
        assert again.to_json() == c.to_json() and again is not c
        assert again.components == c.components


def test_key_orders() -> None:
    assert list(EV.to_json()) == ["job", "k", "S", "C", "n_expected", "missing", "extra", "per_task"]
    assert list(EvalResult.from_json(_wire(EV)).per_task) == ["w2", "w1"]
    assert list(VALUES[5].to_json()) == [
        "t", "variant", "edit_id", "component", "hypothesis", "targets_mode", "predicted_affected", "delta_S",
        "delta_C", "accepted", "outcome", "S", "C", "bundle", "detail", "early_stopped"]
    assert list(VALUES[0].to_json()) == ["rewards", "weights", "tokens", "missing", "extra"]


def test_edit_record_tolerant_reader() -> None:
    r = EditRecord.from_json({"t": 2, "component": "prompt", "bundle": None, "accepted": 1, "diff": "x",
                              "ts": "2025-01-01 00:00:00"})
    assert (r.variant, r.outcome, r.bundle, r.accepted, r.delta_S, r.detail) == ("", "", 0, True, None, "")
    assert EditRecord.from_json({}).t is None


def test_candidate_components_and_exploration_flag() -> None:
    c = Candidate("A", (Edit("1", "skill"), Edit("2", None), Edit("3", ""), Edit("4", "skill")))
    assert c.components == ["skill", "skill"]
    assert Exploration(1, (), 1).reserved_active is False
    assert Exploration(0, ("skill",), 1).reserved_active is False


@pytest.mark.parametrize(("cls", "payload"), [
    (TaskResult, {}), (EvalResult, {"job": "x"}), (Edit, {"component": "prompt"}),
    (Decision, {"variant": "A"}),
    (Calibration, {"delta": 0.1}), (PruneTarget, {}), (Exploration, {"sigma": 1}), (AttributionRow, {}),
    (ReplayEpisode, {"world_id": "w"}), (LiveCycle, {"iteration": 1}), (BetaDecision, {}), (GridPlan, {}),
    (GridValidity, {}), (TaskResult, []), (EvalResult, "nope"), (Candidate, {}), (BetaSweep, {}),
    (GridPlanningContext, {"worker_cap": 2}), (SweepPoint, {"beta": 0.1}),
])
def test_from_json_rejects_incomplete(cls: Any, payload: Any) -> None:
    with pytest.raises(ValueError):
        cls.from_json(payload)


def test_value_type_checks() -> None:
    calls: list[Callable[[], object]] = [
        lambda: EvalResult("x", 2, {"a": tr([1.0])}, 1.2, None, 2, 0),
        lambda: EvalResult("x", 2, {"a": [1.0]}, 0.5, None, 2, 0),  # type: ignore[dict-item]
        lambda: EvalResult("x", 0, {}, 0.5, None, 2, 0),
        lambda: EvalResult("x", 2, {}, 0.5, -1.0, 2, 0),
        lambda: Edit(3),  # type: ignore[arg-type]
        lambda: Edit("E", predicted_affected=(True,)),
        lambda: Edit("E", addresses="a.b"),  # type: ignore[arg-type]
        lambda: EditRecord(0, "A", "E", "prompt", "h", float("nan"), 0.0, False, "REJECTED"),
        lambda: EditRecord(0, "A", "E", "prompt", "h", 0.1, 0.0, 1, "REJECTED"),  # type: ignore[arg-type]
        lambda: Candidate("A", ("not an edit",)),  # type: ignore[arg-type]
        lambda: Candidate("A", ev={"S": 1}),  # type: ignore[arg-type]
        lambda: Decision("A", True, "r", "admissible", novelty=-1),
        lambda: Exploration(2, (), 1),
        lambda: Exploration(1, (), -1),
        lambda: Calibration(-0.1, 2.0, None, 0.0, 0.0, "m", 1, 2, 1, 0.5, None),
        lambda: PruneTarget(3, None),  # type: ignore[arg-type]
        lambda: PruneTarget("skill", float("nan")),
        lambda: AttributionRow(1, "A", "E1", "h", 0, (), None, (), partial=1),  # type: ignore[arg-type]
        lambda: AttributionRow(1, "A", "E1", "h", -1, (), None, ()),
        lambda: ModeConfig.from_json({"mode": "production", "turbo": True}),
        lambda: aggregate({"a": [1.0]}, 2),  # type: ignore[dict-item]
        lambda: exercised_guard(EV, dataclasses.replace(EV, extra={"touched_params": ["a.params.b"],
                                                                   "params_read": "a.params.b"})),
        lambda: exploration(2, (), 1, enabled=KINDS),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            call()


def test_values_are_immutable() -> None:
    with pytest.raises(AttributeError):
        EV.S = 0.9  # type: ignore[misc]
    with pytest.raises(TypeError):
        EV.extra["valid_rate"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        EV.per_task["new"] = tr([1.0])  # type: ignore[index]
    with pytest.raises(TypeError):
        EV.extra.update({"valid_rate": 1.0})  # type: ignore[attr-defined]


def test_values_survive_deepcopy_asdict_and_json() -> None:
    c = Candidate("A", (EDIT,), EV, payload={"manifest": {"name": "h1"}})
    assert copy.deepcopy(EV) == EV and copy.deepcopy(c).to_json() == c.to_json()
    assert dataclasses.asdict(EV)["extra"] == {"valid_rate": 0.5, "params_read": ["a.params.b"]}
    assert json.loads(json.dumps(EV.extra)) == dict(EV.extra)


_reward = st.floats(0, 1)
_task = st.integers(0, 4).flatmap(lambda n: st.tuples(
    st.lists(_reward, min_size=n, max_size=n),
    st.one_of(st.just([]), st.lists(st.floats(0, 100), min_size=n, max_size=n)),
    st.one_of(st.just([]), st.lists(st.one_of(st.none(), st.integers(0, 10**6), st.floats(0, 1e6)),
                                    min_size=n, max_size=n)),
    st.integers(0, n)))


@settings(max_examples=100, deadline=None)
@given(tasks=st.dictionaries(st.text(min_size=1, max_size=8), _task, min_size=1, max_size=5),
       k=st.integers(1, 4))
def test_eval_result_round_trip_property(tasks: dict[str, tuple[list[float], list[float], list[Any], int]],
                                         k: int) -> None:
    ev = ev_of({x: tr(*spec) for x, spec in tasks.items()}, k=k)
    again = EvalResult.from_json(_wire(ev))
    assert again == ev and list(again.per_task) == list(ev.per_task)
