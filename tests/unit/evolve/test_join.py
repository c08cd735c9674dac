"""The in-band join of a step's trial fan-out, the claim of its step, and the per-process memo of a run's
tasks (docs/algorithm/evolve.md#on-the-cluster)."""

from __future__ import annotations

import random
from typing import Any

import fakeredis
import sqlalchemy as sa

from rsi_worker.bench.evolve_suite import sim_suite
from rsi_worker.cluster.evolve_tasks import claim_join
from rsi_worker.evolve.engine import run_step, run_trial_spec
from rsi_worker.evolve.join import batch_of, joined
from rsi_worker.evolve.memo import MEMO


def _pending(stack: Any) -> list[dict[str, Any]]:
    stack.create("r")
    stack.store.set_run("r", status="running")
    out = run_step(stack.env, "r")
    assert out.status == "pending" and out.pending
    return out.pending


def test_a_batch_joins_when_its_last_slot_is_stored_and_a_lost_step_is_sent_again(stack: Any) -> None:
    specs = _pending(stack)
    batch = batch_of(specs)
    key = specs[0]["suite_key"]
    order = list(specs)
    random.Random(3).shuffle(order)
    seen = []
    for spec in order:
        run_trial_spec(stack.env, "r", {**spec, "join": batch})
        seen.append(joined(stack.store, "r", batch, key))
    assert seen == [False] * (len(order) - 1) + [True]  # only the last trial sends the step
    # that step's message is lost (no chord counter, no sweeper): a redelivered trial of the batch finds
    # its row stored, sees the batch complete, and sends the step again
    again = run_trial_spec(stack.env, "r", {**order[0], "join": batch})
    assert again.get("stored") is True and joined(stack.store, "r", batch, key)
    client = fakeredis.FakeRedis()
    assert claim_join(client, "r", batch["id"], "step-2")  # the resent step claims the batch
    assert not claim_join(client, "r", batch["id"], "step-3")  # a duplicate stops
    assert claim_join(client, "r", batch["id"], "step-2")  # its own redelivery goes on
    assert run_step(stack.env, "r").status == "running"  # the baseline is judged
    assert len(stack.store.trials("r", -1)) == len(specs)  # no trial stored twice


def test_an_early_stopped_candidates_skipped_slots_count_as_resolved(stack: Any) -> None:
    specs = [s for s in _pending(stack) if s["candidate"] == "base0"]
    key = specs[0]["suite_key"]
    certain = [{**s, "stop": [2.0, 0.1, 2.0]} for s in specs]  # S★ above any score: rejection certain
    assert joined(stack.store, "r", batch_of(certain), key)
    assert not joined(stack.store, "r", batch_of(specs), key)  # no stop: every row is waited for
    retry = [{**s, "attempt": 1, "stop": [2.0, 0.1, 2.0]} for s in specs]
    assert not joined(stack.store, "r", batch_of(retry), key)  # a re-run of a missing trial is never skipped


def test_a_trial_with_a_warm_memo_reads_its_rows_and_writes_its_own_in_two_statements(stack: Any) -> None:
    specs = _pending(stack)
    run_trial_spec(stack.env, "r", specs[0])  # warms the memo
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        verb = statement.split()[0].upper()
        if verb in ("SELECT", "INSERT", "UPDATE", "DELETE"):  # not the transaction's BEGIN
            statements.append(verb)

    sa.event.listen(stack.engine, "before_cursor_execute", count)
    try:
        run_trial_spec(stack.env, "r", specs[1])
    finally:
        sa.event.remove(stack.engine, "before_cursor_execute", count)
    assert statements == ["SELECT", "INSERT"]
    # a suite replaced under the same name is loaded again
    loads = MEMO.loads["static"]
    stack.store.save_suite(sim_suite("s", n_tasks=4, n_heldout=2, seed=11), replace=True)
    run_step(stack.env, "r")
    assert MEMO.loads["static"] == loads + 1
