"""The chaos plan's schedule and the fault report's recovery time, on synthetic data."""

from __future__ import annotations

import pytest

from rsi_common.errors import InvalidInput
from rsi_worker.chaos.faults import ChaosPlan, Fault
from rsi_worker.chaos.report import RunFacts, live_again_s, recovery_s


def test_the_plan_spreads_each_kind_over_the_middle_of_the_load() -> None:
    plan = ChaosPlan(100.0, kills=4, redis_restarts=1, db_restarts=1, broker_pauses=0)
    times = plan.schedule()
    assert [k for _, k in times].count("kill") == 4 and len(times) == 6
    assert all(10 <= t <= 90 for t, _ in times) and times == sorted(times, key=lambda x: x[0])
    with pytest.raises(InvalidInput, match="kills"):
        ChaosPlan(10.0, kills=-1)


def run(agent: str, status: str, started: float, finished: float | None) -> RunFacts:
    return (f"run-{agent}-{started}", agent, status, started, finished, "io", "v1", 1)


def test_recovery_waits_for_every_affected_agent_to_decide_again() -> None:
    fault = Fault("kill", 100.0, running=[("r1", "a"), ("r2", "b")])
    runs = [run("a", "interrupted", 90, 170), run("a", "adopted", 171, 180),  # re-run after the sweep
            run("b", "kept", 95, 104)]  # b's run finished normally after the fault
    assert recovery_s(fault, runs) == 80.0
    assert recovery_s(fault, runs[:1] + runs[2:]) is None  # a never decided again: unrecovered
    assert recovery_s(Fault("kill", 100.0), runs) == 0.0  # nothing was running


def test_an_agent_is_live_again_when_its_run_went_on_or_a_later_run_was_not_interrupted() -> None:
    fault = Fault("kill", 100.0, running=[("run-a-90", "a"), ("run-b-95", "b")])
    runs = [run("a", "interrupted", 90, 170), run("a", "adopted", 171, 180),
            run("b", "kept", 95, 104)]
    assert live_again_s(fault, runs) == 71.0  # b's run went on (0); a's next run started at 171
    assert live_again_s(fault, runs[:1] + runs[2:]) is None
