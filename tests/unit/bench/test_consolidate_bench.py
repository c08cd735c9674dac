"""``rsi bench consolidate`` arithmetic: the critical path and capacity bound of a synthetic call
graph, the early-stop ceiling, savings against it and the no-signal percentiles
(docs/performance/consolidation.md)."""

from __future__ import annotations

from typing import Any

import pytest

from rsi_worker.bench.consolidate import critical_path, failures_to_stop, of_ceiling, saving_pct
from rsi_worker.bench.nosignal import series


def trial(candidate: str, steps: int, judge: int, source: str = "replay") -> dict[str, Any]:
    return {"candidate": candidate, "source": source, "status": "ok",
            "result": {"replay": {"steps": steps}, "usage": {"judge": {"calls": judge}}}}


def draft(proposer: int, critic: int) -> dict[str, Any]:
    return {"usage": {"proposer": {"calls": proposer}, "critic": {"calls": critic}}}


PARAMS = {"usage": {"signal": {"calls": 3}, "analyst": {"calls": 1}}, "signals_read": {"w1": {}, "w2": {}}}
ROWS = [
    trial("incumbent", 2, 1), trial("incumbent", 2, 1), trial("incumbent", 7, 1, source="recorded"),
    trial("incumbent", 3, 1),
    trial("A", 2, 1), trial("A", 4, 1),  # A: draft 3, longest trial 5 -> chain 8
    trial("B", 1, 1), trial("B", 2, 1),  # B: draft 6, longest trial 3 -> chain 9 (the critical one)
]
DRAFTS = {"A": draft(2, 1), "B": draft(4, 2)}


def test_critical_path_follows_the_slowest_draft_then_trial_chain() -> None:
    cp = critical_path(PARAMS, ROWS, DRAFTS, latency_ms=100.0, threads=100)
    # signal: 3 reader calls over 2 pairs read concurrently -> 2; a recorded trial reuses its answer
    assert cp["segments_calls"] == {"signal": 2, "incumbent_trial": 4, "analyst": 1, "draft": 6,
                                    "candidate_trial": 3}
    assert cp["calls"] == 16 and cp["ms"] == 1600.0
    assert cp["trials"] == {"incumbent": 4, "candidates": 4}
    assert cp["all_calls"] == {"incumbent_trials": 3 + 3 + 1 + 4, "candidate_trials": 3 + 5 + 2 + 3,
                               "drafts": 9}
    # with threads to spare the capacity bound is the critical path
    assert cp["capacity_calls"] == 16 and cp["capacity_over_cp"] == 1.0


def test_capacity_bound_charges_each_fan_out_its_work_over_the_threads() -> None:
    cp = critical_path(PARAMS, ROWS, DRAFTS, latency_ms=100.0, threads=2)
    # 2 + 1 + max(4, 11 / 2) + max(9, (3 + 6 + 3 + 5 + 2 + 3) / 2)
    assert cp["capacity_calls"] == 2 + 1 + 5.5 + 11
    assert cp["capacity_ms"] == 1950.0 and cp["capacity_over_cp"] == round(19.5 / 16, 3)
    assert cp["calls"] == 16  # the critical path does not depend on the threads


def test_a_gated_draft_is_a_chain_of_its_draft_alone() -> None:
    cp = critical_path(PARAMS, ROWS[:4], {"A": draft(5, 4)}, latency_ms=1.0, threads=8)
    assert cp["segments_calls"]["draft"] == 9 and cp["segments_calls"]["candidate_trial"] == 0


def test_ceiling_counts_the_heaviest_failures_the_exact_bound_needs() -> None:
    params = {"round": {"S_star": 0.8, "delta": 0.1, "S_t": 0.8},
              "checks": {"w1": [{}, {}], "w2": [{}], "w3": [{}]}}
    # k = 2: weights 2 2 1 1 1 1 (total 8); after two failed trials Ŝ_max = 4/8 < 0.7, after one 6/8 is not
    assert failures_to_stop(params, 2) == {"trials": 6, "needed": 2, "max_saving_pct": 66.7}
    easy = {**params, "round": {"S_star": 0.8, "delta": 0.8, "S_t": 0.8}}  # floor 0: never stoppable
    assert failures_to_stop(easy, 2) == {"trials": 6, "needed": None}
    assert failures_to_stop({"checks": params["checks"]}, 2)["needed"] is None


def test_savings_and_their_share_of_the_ceiling() -> None:
    assert saving_pct(40, 15) == 62.5
    assert saving_pct(0, 0) is None
    assert of_ceiling(56.3, 62.5) == 90.1
    assert of_ceiling(None, 62.5) is None and of_ceiling(50.0, None) is None and of_ceiling(50.0, 0.0) is None


def test_no_signal_series_medians_and_nearest_rank_p99() -> None:
    # open 1..100 ms, finalize 1 ms, CPU 0.5 ms a run (2 ms every tenth run)
    samples = [(i / 1000, 1 / 1000, "recorded", i % 2, (2.0 if i % 10 == 0 else 0.5) / 1000)
               for i in range(1, 101)]
    out = series(samples)
    assert out["runs"] == 100
    assert out["median_ms"] == 51.5 and out["p99_ms"] == 100.0 and out["max_ms"] == 101.0
    assert out["open_median_ms"] == 50.5 and out["finalize_median_ms"] == 1.0
    assert out["signal_calls_per_run"] == 0.5 and out["statuses"] == {"recorded": 100}
    assert out["cpu_median_ms"] == 0.5
    with pytest.raises(ValueError):
        series([])
