"""The capacity-aware bound of an evolve round on synthetic call graphs
(docs/algorithm/evolve.md#the-rounds-bound)."""

from __future__ import annotations

import pytest

from rsi_worker.bench.evolve_bound import Job, earliest_starts, list_schedule, lower_bound, round_jobs


def test_the_longest_chain_bounds_a_graph_with_slots_to_spare() -> None:
    jobs = [Job("a", 3, "p"), Job("b", 2, "p", ("a",)), Job("c", 1, "p")]
    assert earliest_starts(jobs) == {"a": 0.0, "b": 3.0, "c": 0.0}
    assert lower_bound(jobs, {"p": 8}) == 5.0


def test_plain_work_over_slots_when_nothing_depends() -> None:
    jobs = [Job(f"t{i}", 2, "trial") for i in range(16)]
    assert lower_bound(jobs, {"trial": 8}) == 4.0
    assert lower_bound(jobs, {"trial": 16}) == 2.0


def test_work_that_waits_for_a_gate_is_counted_after_the_gate() -> None:
    # a draft of 4 units, a smoke trial, then 14 trials on 8 slots: nothing overlaps the draft, so
    # the trials' 28 units of work start at 6 (the plain bound 4 + 30/8 would be lower)
    draft = Job("draft", 4, "draft")
    smoke = Job("smoke", 2, "trial", ("draft",))
    rest = [Job(f"t{i}", 2, "trial", ("smoke",)) for i in range(14)]
    assert lower_bound([draft, smoke, *rest], {"draft": 1, "trial": 8}) == 6 + 28 / 8


def test_each_pool_counts_only_its_own_work() -> None:
    jobs = [Job(f"d{i}", 2, "digest") for i in range(8)] + [Job(f"t{i}", 2, "trial") for i in range(8)]
    assert lower_bound(jobs, {"digest": 8, "trial": 8}) == 2.0
    assert lower_bound(jobs, {"digest": 2, "trial": 8}) == 8.0


def test_bad_graphs_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'x': unknown dependency"):
        lower_bound([Job("a", 1, "p", ("x",))], {"p": 1})
    with pytest.raises(ValueError, match="'a': dependency cycle"):
        lower_bound([Job("a", 1, "p", ("b",)), Job("b", 1, "p", ("a",))], {"p": 1})
    with pytest.raises(ValueError, match="'a': duplicate"):
        lower_bound([Job("a", 1, "p"), Job("a", 1, "p")], {"p": 1})
    with pytest.raises(ValueError, match="pool 'q'"):
        lower_bound([Job("a", 1, "q")], {"p": 1})
    assert lower_bound([], {}) == 0.0


def _round() -> dict[str, object]:
    def draft(proposer: int, critic: int) -> dict[str, object]:
        return {
            "usage": {"proposer": {"calls": proposer}, "critic": {"calls": critic}},
            "smoke": {"ok": True, "tasks": ["w1", "w2"]},
        }

    return {"t": 0, "analysis": {"digests": [{}] * 8}, "drafts": {"A": draft(3, 1), "B": draft(5, 1)}}


def test_a_rounds_graph_chains_analysis_draft_smoke_and_trials() -> None:
    jobs = round_jobs(_round(), {"A": 16, "B": 16}, digester_calls=16, heldout_owed=0, heldout_after=0)
    e = earliest_starts(jobs)
    by = {j.name: j for j in jobs}
    assert e["report"] == 2 and e["draft A"] == e["draft B"] == 3  # the proposer reads the report
    assert e["smoke A0"] == 7 and e["smoke B1"] == 9  # a smoke trial waits for its own draft only
    assert e["trial A0"] == 9 and e["trial B13"] == 11  # the rest wait for the smoke gate
    assert sum(1 for j in jobs if j.pool == "trial") == 32 and by["trial A0"].length == 2
    # chain 3 + 6 + 2 + 2 = 13; after A's smoke (9): A's 14 trials, B's 2 smoke and 14 trials = 60 units
    pools = {"digest": 8, "draft": 2, "trial": 8, "main": 1}
    assert lower_bound(jobs, pools) == 9 + 60 / 8


def test_held_out_trials_run_beside_the_round_or_after_its_judgement() -> None:
    rnd = {"t": 1, "analysis": {"digests": [{}] * 6}, "drafts": {"A": {"usage": {"proposer": {"calls": 2}}}}}
    beside = round_jobs(rnd, {}, digester_calls=12, heldout_owed=8, heldout_after=0)
    assert earliest_starts(beside)["heldout 0"] == 0
    assert lower_bound(beside, {"digest": 8, "draft": 2, "trial": 8, "main": 1}) == 5  # 3 + 2: the chain
    after = round_jobs(rnd, {}, digester_calls=12, heldout_owed=0, heldout_after=8)
    assert earliest_starts(after)["winner heldout 7"] == 5
    assert lower_bound(after, {"digest": 8, "draft": 2, "trial": 8, "main": 1}) == 7


def test_the_structure_of_round_0_before_and_after_the_shared_slots() -> None:
    jobs = round_jobs(_round(), {"A": 16, "B": 16}, digester_calls=16, heldout_owed=0, heldout_after=0)
    pools = {"digest": 8, "draft": 2, "trial": 8, "main": 1}
    assert list_schedule(jobs, pools) == 17  # shared slots, smoke first: 1.03 x the bound (16.5)
    # trial_parallel 4 per candidate (the slots before): 19, 1.15 x the bound
    own = [
        Job(j.name, j.length, f"trial {j.name.split()[1][0]}" if j.pool == "trial" else j.pool, j.after)
        for j in jobs
    ]
    assert list_schedule(own, {"digest": 8, "draft": 2, "trial A": 4, "trial B": 4, "main": 1}) == 19
    assert list_schedule([], {}) == 0.0
