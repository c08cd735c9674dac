"""The release-aware capacity bound of ``rsi bench consolidate`` and the timeline's attribution of a
run's wall (``rsi bench consolidate --timeline``) on synthetic call graphs and events
(docs/performance/consolidation.md#rsi-bench-consolidate)."""

from __future__ import annotations

from typing import Any

from rsi_worker.bench.consolidate import critical_path, released_bound
from rsi_worker.bench.timeline import _busy, attribute, phase_spans


def trial(candidate: str, steps: int, judge: int) -> dict[str, Any]:
    return {"candidate": candidate, "source": "replay", "status": "ok",
            "result": {"replay": {"steps": steps}, "usage": {"judge": {"calls": judge}}}}


def test_trials_cannot_start_before_their_own_draft() -> None:
    # the benchmark's shape: drafts of 4 and 6 calls, 16 trials of 3 calls each, 16 threads
    drafts, work = {"A": 4, "B": 6}, {"A": 48, "B": 48}
    # chain 9; τ = 0: (10 + 96) / 16; τ = 4: 4 + (96 + 2 left of B's draft) / 16; τ = 6: 6 + 48 / 16
    assert released_bound(drafts, work, 9, 16) == 4 + 98 / 16
    # with threads to spare only the chain binds; with one thread, all the work
    assert released_bound(drafts, work, 9, 1000) == 9
    assert released_bound(drafts, work, 9, 1) == 106
    assert released_bound({}, {}, 0, 4) == 0


def test_capacity_bound_of_a_run_counts_the_drafts_release() -> None:
    params = {"usage": {"signal": {"calls": 1}, "analyst": {"calls": 1}}, "signals_read": {"w": {}}}
    rows = ([trial("incumbent", 2, 1)] * 16 + [trial("A", 2, 1)] * 16 + [trial("B", 2, 1)] * 16)
    drafts = {"A": {"usage": {"proposer": {"calls": 3}, "critic": {"calls": 1}}},
              "B": {"usage": {"proposer": {"calls": 5}, "critic": {"calls": 1}}}}
    cp = critical_path(params, rows, drafts, latency_ms=200.0, threads=16)
    assert cp["calls"] == 1 + 3 + 1 + 6 + 3
    # the old bound (Σ calls / threads per phase) said 14 = CP; A's trials wait for A's draft
    assert cp["capacity_calls"] == round(1 + 3 + 1 + 4 + 98 / 16, 2)
    assert cp["capacity_over_cp"] == round((9 + 98 / 16) / 14, 3)


def ev(kind: str, t0: float, t1: float, **more: Any) -> dict[str, Any]:
    return {"kind": kind, "t0": t0, "t1": t1, **more}


def test_busy_is_the_union_of_spans() -> None:
    assert _busy([(0.0, 1.0), (0.5, 1.5), (2.0, 2.5), (2.1, 2.2)]) == 2.0
    assert _busy([]) == 0.0


def test_attribution_splits_the_wall_by_phase_and_follows_each_candidate() -> None:
    events = [
        ev("step", 0.0, 0.3, step="open", cpu=0.0), ev("call", 0.05, 0.25, role="signal", label=""),
        ev("member", 0.3, 1.0, members="trials", label="incumbent w#0", candidate="incumbent", cpu=0.01),
        ev("call", 0.35, 0.95, role="policy", label="incumbent w#0"),
        ev("step", 1.1, 1.35, step="after_incumbent", cpu=0.0),
        ev("call", 1.12, 1.32, role="analyst", label=""),
        ev("member", 1.35, 2.0, members="drafts", label="draft A", candidate="A", cpu=0.05),
        ev("call", 1.4, 1.6, role="proposer", label="draft A"),
        ev("call", 1.7, 1.9, role="critic", label="draft A"),
        ev("member", 2.1, 3.0, members="trials", label="A w#0", candidate="A", cpu=0.02),
        ev("wave_wait", 2.15, 2.35, label="A w#0"),
        ev("call", 2.4, 2.6, role="policy", label="A w#0"), ev("call", 2.6, 2.8, role="judge", label="A w#0"),
        ev("step", 3.05, 3.1, step="judge_round", cpu=0.0), ev("step", 3.1, 3.2, step="close", cpu=0.0),
    ]
    assert set(phase_spans(events)) == {"open", "incumbent", "after_incumbent", "candidates", "judge_round",
                                        "close"}
    out = attribute(events, {"signal": 1, "incumbent_trial": 3, "analyst": 1, "draft": 2,
                             "candidate_trial": 2}, latency_ms=200.0, threads=4)
    phases = {p["phase"]: p for p in out["phases"]}
    assert phases["incumbent"]["wall_s"] == 0.8 and phases["incumbent"]["excess_s"] == 0.2
    assert phases["candidates"]["cp_s"] == 0.8 and phases["candidates"]["excess_s"] == round(1.7 - 0.8, 3)
    a = out["candidates"]["per_candidate"]["A"]
    assert a["draft_calls"] == 2 and a["draft_beyond_calls_s"] == 0.25
    assert a["first_trial_start_after_draft_s"] == 0.1 and a["wave_wait_s_max"] == 0.2
    assert a["wave_waiting_trials"] == 1
    # 0.9 s in the member: 0.4 s of calls, 0.2 s waiting for the first wave, 0.3 s of the rest
    assert a["trial_beyond_calls_s_mean"] == 0.3
    assert out["candidates"]["tail_s"] == 0.05 and out["candidates"]["peak_members_running"] == 1
    assert out["wall_s"] == 3.2
