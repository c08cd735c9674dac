"""The in-band join (``rsi_worker/consolidate/join.py``) and the step claims
(``rsi_worker/cluster/join.py``): a run whose chord message was lost is judged from its stored rows.

The run is driven member by member through the state machine on SQLite and fakeredis (no broker);
the join must name no step until the last member of a fan-out stored its row, then the step, once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fakeredis

from rsi_common.config import Settings
from rsi_worker.cluster.join import claim_dispatch, claim_step, dispatch_key, step_key
from rsi_worker.cluster.tasks import join_in_band
from rsi_worker.consolidate import flow
from rsi_worker.consolidate.join import ready_step
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.pipeline import Stack

REQUEST = "Compare laptops: use search query=laptops"


class Recorder:
    """The ``send_task`` of an app: what an in-band join dispatched."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any], str]] = []

    def send_task(self, name: str, args: list[Any], queue: str) -> None:
        self.sent.append((name, args, queue))


def test_the_last_stored_member_of_each_fan_out_names_the_next_step_once(tmp_path: Path) -> None:
    stack = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0))
    stack.say("shop", "c1", REQUEST)
    io = str(stack.say("shop", "c1", CORRECTION).world["io_id"])
    deps = stack.deps
    nxt = flow.open_run(deps, stack.lease("shop", io))
    assert nxt.kind == "trials" and nxt.slots
    run_id = nxt.ctx.run_id
    for slot in nxt.slots:
        assert ready_step(deps, run_id) is None  # a slot is still empty
        assert flow.run_trial(deps, run_id, slot)["status"] == "ok"
    assert ready_step(deps, run_id) == "after_incumbent"

    nxt = flow.run_step(deps, "after_incumbent", run_id)
    assert nxt.kind == "drafts" and len(nxt.variants) >= 2
    assert ready_step(deps, run_id) is None  # no draft stored yet
    slots = []
    for variant in nxt.variants:
        assert ready_step(deps, run_id) is None
        slots += flow.follow_on("drafts", flow.run_draft(deps, run_id, variant))
    assert slots  # at least one draft passed and launched its trials
    for slot in slots:
        assert ready_step(deps, run_id) is None
        flow.run_trial(deps, run_id, slot)
    assert ready_step(deps, run_id) == "judge_round"

    app = Recorder()
    assert join_in_band(app, deps, run_id) == "judge_round"  # type: ignore[arg-type]
    assert join_in_band(app, deps, run_id) is None  # dispatched once, however many members see it
    assert app.sent == [("rsi.judge_round", [None, run_id], "judge")]

    result = flow.run_step(deps, "judge_round", run_id)
    assert result.kind == "final"
    flow.close(deps, result)
    assert ready_step(deps, run_id) is None  # a closed run is never joined again
    stack.close()


def test_the_execution_claim_is_reentrant_for_its_task_and_exclusive_for_others() -> None:
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    assert claim_step(client, "run_1", "judge_round", "task-a", 60)
    assert claim_step(client, "run_1", "judge_round", "task-a", 60)  # a redelivery of the same message
    assert not claim_step(client, "run_1", "judge_round", "task-b", 60)  # the chord's second judge
    assert claim_step(client, "run_1", "after_incumbent", "task-b", 60)  # per step
    assert 0 < int(client.ttl(step_key("run_1", "judge_round"))) <= 60
    assert claim_dispatch(client, "run_1", "judge_round", 60)
    assert not claim_dispatch(client, "run_1", "judge_round", 60)
    assert 0 < int(client.ttl(dispatch_key("run_1", "judge_round"))) <= 60
