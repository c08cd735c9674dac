"""The shared queue of a step's trial batch (docs/algorithm/evolve.md#the-batchs-queue) and the early
stop's lean read of a candidate's rows."""

from __future__ import annotations

from typing import Any

import fakeredis

from rsi_worker.cluster.evolve_queue import QUEUE_TTL_S, lane_specs, push, queue_key, release, taken_key
from rsi_worker.evolve.engine import run_step, run_trial_spec
from rsi_worker.evolve.evaluation import EvalJob, bounds
from rsi_worker.evolve.join import batch_of, joined
from rsi_worker.evolve.memo import MEMO


def _spec(candidate: str, j: int) -> dict[str, Any]:
    return {"t": 0, "candidate": candidate, "task": f"task{j}", "trial": j % 2, "attempt": 0}


def test_lanes_drain_the_queue_in_order_and_go_on_with_a_later_send() -> None:
    client = fakeredis.FakeRedis()
    a = [_spec("A", j) for j in range(5)]
    b = [_spec("B", j) for j in range(3)]
    push(client, "r", "q", a)
    first, second = lane_specs(client, "r", "q", "lane1"), lane_specs(client, "r", "q", "lane2")
    got = [next(first), next(second), next(first)]
    assert got == a[:3]  # oldest first, each spec to one lane
    assert 0 < client.ttl(queue_key("r", "q")) <= QUEUE_TTL_S
    assert 0 < client.ttl(taken_key("r", "q", "lane1")) <= QUEUE_TTL_S
    push(client, "r", "q", b)  # the second candidate's send, while the first one's lanes run
    rest = list(first)
    assert rest == [*a[3:], *b]  # the running lane goes on with B's trials: no new lane needed
    assert list(second) == []  # nothing left: the other lane ends
    assert not client.exists(queue_key("r", "q"))  # an emptied queue is gone
    for lane in ("lane1", "lane2"):
        release(client, "r", "q", lane)
    assert client.keys("*") == []  # no key outlives its lanes


def test_a_redelivered_lane_runs_first_what_it_had_taken() -> None:
    client = fakeredis.FakeRedis()
    specs = [_spec("A", j) for j in range(4)]
    push(client, "r", "q", specs)
    killed = lane_specs(client, "r", "q", "lane1")
    assert [next(killed), next(killed)] == specs[:2]  # killed while running its second trial
    other = lane_specs(client, "r", "q", "lane2")
    assert next(other) == specs[2]
    # the same task delivered again: what it took (maybe not run, maybe stored) first, then the queue
    assert list(lane_specs(client, "r", "q", "lane1")) == [specs[0], specs[1], specs[3]]
    assert list(other) == []
    # a lane sent with its specs runs them and takes no queue
    assert list(lane_specs(client, "r", None, "lane3", specs[:1])) == specs[:1]


def test_the_lean_read_gives_the_early_stop_the_same_bounds_and_status(stack: Any) -> None:
    stack.create("r")
    stack.store.set_run("r", status="running")
    out = run_step(stack.env, "r")
    assert out.status == "pending"
    specs = [s for s in out.pending if s["candidate"] == "base0"]
    batch = batch_of(out.pending)
    for spec in specs[:-1]:
        run_trial_spec(stack.env, "r", {**spec, "join": batch})
    static = MEMO.static(stack.sessions, "r", specs[0]["suite_key"])
    job = EvalJob("r", -1, "base0", static.evolve_ids, static.checks, int(specs[0]["k"]), static.config.seed)
    full, lean = stack.store.trials("r", -1, "base0"), stack.store.trial_tallies("r", -1, "base0")
    assert len(lean) == len(full) == len(specs) - 1
    assert bounds(job, lean) == bounds(job, full)
    assert bounds(job, full)[1] > 0  # some weight stored: the comparison is not of empty tallies
    assert [(r["world_id"], r["trial"], r["attempt"], r["status"]) for r in lean] == [
        (r["world_id"], r["trial"], r["attempt"], r["status"]) for r in full
    ]
    assert not joined(stack.store, "r", batch, specs[0]["suite_key"])
    # rows that passed some checks (the sim's H0 passes none): passed = reward × weight
    tallies = [("ok", 1, 2), ("ok", 2, 3), ("missing", 0, 2), ("ok", 3, 3)]
    for j, (status, passed, checks) in enumerate(tallies):
        values = {"status": status, "reward": passed / checks, "weight": checks, "result": {"passed": passed}}
        stack.store.save_trial("r", 0, "A", f"task{j}", 0, 0, values)
    full, lean = stack.store.trials("r", 0, "A"), stack.store.trial_tallies("r", 0, "A")
    assert [r["result"]["passed"] for r in lean] == [1, 2, 0, 3]
    assert bounds(job, lean) == bounds(job, full) and bounds(job, full)[0] == 6
