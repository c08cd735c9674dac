"""The round's writes off its critical path and the held-out figure collected by its own step
(docs/algorithm/evolve.md#the-rounds-writes; rsi_worker/evolve/writer.py, engine.collect_heldout)."""

from __future__ import annotations

from typing import Any

import pytest

from rsi_common.errors import InvalidInput
from rsi_worker.evolve.engine import run_inline, run_step, run_trial_spec
from rsi_worker.evolve.slots import SlotPool
from rsi_worker.evolve.writer import RoundWriter


def test_the_writer_applies_writes_in_order_and_raises_at_flush() -> None:
    done: list[int] = []
    with RoundWriter() as writer:
        futures = [writer.put(lambda i=i: done.append(i)) for i in range(50)]
        futures[10].result()
        assert done[:11] == list(range(11))  # a write's future ends after every write put before it
        writer.flush()
        assert done == list(range(50))

        def boom() -> None:
            raise RuntimeError("disk full")

        writer.put(boom)
        writer.put(lambda: done.append(50))
        with pytest.raises(RuntimeError, match="disk full"):
            writer.flush()
    assert done[-1] == 50  # the writes after a failed one still ran, in order


def test_the_slots_start_their_threads_as_jobs_arrive() -> None:
    with SlotPool(8) as idle:
        pass
    assert idle._threads == []  # a step that runs no trial starts no thread
    with SlotPool(8) as pool:
        assert pool.map(lambda x: x + 1, [1]) == [2]
        assert len(pool._threads) == 1  # one job, one thread
        assert sorted(pool.map(lambda x: x, list(range(20)))) == list(range(20))
        assert 1 <= len(pool._threads) <= 8


def _cluster(stack: Any, name: str, run_early: bool) -> list[tuple[int, str, list[str]]]:
    """Drive ``name`` as the cluster does, its trials run by the send itself when ``run_early`` (lanes that
    finish beside the step) or after the step returned; ``(t of the state it ran on, status, candidates
    deferred)`` per step."""
    steps: list[tuple[int, str, list[str]]] = []

    def send(specs: list[dict[str, Any]]) -> None:
        if run_early:
            for spec in specs:
                run_trial_spec(stack.env, name, spec)

    for _ in range(20):
        before = stack.store.run(name)[4]
        out = run_step(stack.env, name, send=send)
        deferred = sorted({str(s["candidate"]) for s in out.pending})
        steps.append((int(before["t"]) if before else -1, out.status, deferred))
        for spec in out.pending:
            run_trial_spec(stack.env, name, spec)  # a stored slot is found, never run twice
        if out.status not in ("pending", "running"):
            break
    return steps


@pytest.mark.parametrize("run_early", [True, False])
def test_a_round_whose_held_out_trials_ran_beside_it_is_judged_in_one_step(
    stack: Any, run_early: bool
) -> None:
    ref = stack.create("ref", params={"T": 2})
    assert run_inline(stack.env, ref).status == "done"
    name = stack.create("r", params={"T": 2})
    stack.store.set_run(name, status="running")
    steps = _cluster(stack, name, run_early)
    # round 1 owes round 0's winner's held-out figure: its trials go out at the round's start
    round1 = [s for s in steps if s[0] == 1]
    if run_early:  # stored before the step's end: the step judges at once, nothing pending
        assert round1 == [(1, "running", [])]
    else:  # not stored yet: the batch goes as before, the next step judges
        assert round1 == [(1, "pending", ["heldout"]), (1, "running", [])]
    ran, inline = stack.store.run(name)[4], stack.store.run(ref)[4]
    assert steps[-1][1] == "done" and "heldout_pending" not in ran
    assert ran["heldout"] == inline["heldout"] and ran["records"] == inline["records"]
    rows = stack.store.trials(name)
    keys = [(r["t"], r["candidate"], r["world_id"], r["trial"], r["attempt"]) for r in rows]
    assert len(keys) == len(set(keys))  # no trial stored twice


def test_the_store_updates_a_round_and_a_run_without_loading_them_and_refuses_unknowns(stack: Any) -> None:
    name = stack.create("r")
    stack.store.set_round(name, 0, before={"t": 0})
    stack.store.set_round(name, 0, analysis={"digests": []})  # only the given field changes
    stack.store.set_round(name, 1)  # an empty round row
    stack.store.set_run(name, status="running", state={"t": 1}, round_t=0, round_fields={"decision": {}})
    r0, r1 = stack.store.round(name, 0), stack.store.round(name, 1)
    assert (r0["before"], r0["analysis"], r0["decision"]) == ({"t": 0}, {"digests": []}, {})
    assert r0["drafts"] is None
    assert r1 is not None and r1["before"] is None
    assert stack.store.run(name)[2] == "running" and stack.store.run(name)[4] == {"t": 1}
    with pytest.raises(InvalidInput, match="unknown evolve run 'nope'"):
        stack.store.set_run("nope", status="done", round_t=5, round_fields={"before": {}})
    with pytest.raises(InvalidInput, match="unknown field"):
        stack.store.set_run(name, status="done", round_t=0, round_fields={"colour": 1})
    assert stack.store.run(name)[2] == "running"  # nothing of a refused write is stored
    assert stack.store.round(name, 5) is None
