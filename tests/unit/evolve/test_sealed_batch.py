"""A step's trials sent before its batch is whole, the batch sealed after the fact
(docs/algorithm/evolve.md#on-the-cluster; rsi_worker/cluster/evolve_batch.py)."""

from __future__ import annotations

from typing import Any

import fakeredis

from rsi_worker.cluster.evolve_batch import Fanout, failed, mark_failed, sealed_batch
from rsi_worker.cluster.evolve_tasks import claim_join
from rsi_worker.evolve.engine import run_step, run_trial_spec
from rsi_worker.evolve.join import joined

Lanes = list[tuple[list[dict[str, Any]], dict[str, Any]]]


def _step(stack: Any) -> tuple[Fanout, Lanes, list[dict[str, Any]]]:
    """The baseline's step with a fan-out that records its lanes instead of sending them."""
    stack.create("r")
    stack.store.set_run("r", status="running")
    lanes: Lanes = []
    fan = Fanout(lambda specs, batch: lanes.append((specs, batch)))
    out = run_step(stack.env, "r", send=fan.early)
    assert out.status == "pending"
    return fan, lanes, out.pending


def _lane_joins(stack: Any, client: Any, batch: dict[str, Any], key: str) -> bool:
    """What a lane does after its trials: the join on the whole batch, if sealed."""
    whole = sealed_batch(client, "r", batch)
    return whole is not None and joined(stack.store, "r", whole, key)


def test_the_join_waits_for_the_sealed_batch_and_a_lost_step_is_sent_again(stack: Any) -> None:
    client = fakeredis.FakeRedis()
    fan, lanes, pending = _step(stack)
    # each evaluation's specs were sent as soon as known (base0, base1, the held-out split), by id only
    sends = sorted(lanes, key=lambda lane: str(lane[0][0]["candidate"]))
    assert [{s["candidate"] for s in specs} for specs, _ in sends] == [{"base0"}, {"base1"}, {"heldout"}]
    assert all(batch == {"id": fan.id} for _, batch in lanes)
    assert sorted(map(str, fan.sent)) == sorted(map(str, pending))
    key = pending[0]["suite_key"]
    first = sends[0][0]
    for spec in first:
        run_trial_spec(stack.env, "r", {**spec})
    # the first evaluation's slots are all stored: a join over them alone would fire; unsealed, none does
    alone = [[s["t"], s["candidate"], s["task"], s["trial"], s["attempt"]] for s in first]
    assert joined(stack.store, "r", {"slots": alone, "stops": {}}, key)
    assert not _lane_joins(stack, client, sends[0][1], key)
    batch = fan.seal(client, "r", pending)
    assert len(lanes) == 3  # nothing left to send: every slot went out early
    assert not joined(stack.store, "r", batch, key)  # the step's own check at the seal: not complete
    for specs, _ in sends[1:]:
        for spec in specs:
            run_trial_spec(stack.env, "r", spec)
    assert _lane_joins(stack, client, sends[-1][1], key)  # the last lane sees the sealed batch complete
    # its step message is lost: a redelivered early lane finds its rows stored and sends the step again
    again = run_trial_spec(stack.env, "r", first[0])
    assert again.get("stored") is True and _lane_joins(stack, client, sends[0][1], key)
    assert claim_join(client, "r", fan.id, "step-2")
    assert not claim_join(client, "r", fan.id, "step-3")  # a second step for the batch stops
    assert run_step(stack.env, "r").status == "running"  # the baseline is judged
    assert len(stack.store.trials("r", -1)) == len(pending)  # no trial stored twice


def test_a_batch_complete_at_its_seal_is_judged_by_its_step_and_a_failed_lane_is_seen(stack: Any) -> None:
    client = fakeredis.FakeRedis()
    fan, lanes, pending = _step(stack)
    key = pending[0]["suite_key"]
    for specs, _ in lanes:  # every early trial ran while the step still worked
        for spec in specs:
            run_trial_spec(stack.env, "r", spec)
    batch = fan.seal(client, "r", pending)
    assert joined(stack.store, "r", batch, key)  # the step's check: complete, it judges itself
    assert claim_join(client, "r", fan.id, "the-step")
    assert not claim_join(client, "r", fan.id, "a-lane's-step")  # a lane that saw it too: its step stops
    assert run_step(stack.env, "r").status == "running"
    # a lane that raised before the seal marks the batch: the step sees it when it seals
    other = Fanout(lambda specs, batch: None)
    assert not failed(client, "r", other.id)
    mark_failed(client, "r", other.id)
    assert failed(client, "r", other.id) and sealed_batch(client, "r", {"id": other.id}) is None
