"""The lease of an evolve run's chain, the sweeper's watch (docs/algorithm/evolve.md#lease-and-recovery)."""

from __future__ import annotations

from typing import Any

import fakeredis

from rsi_common.coord import Coordinator, pending_key
from rsi_common.dispatch import TASK_EVOLVE_STEP, RecordingDispatcher
from rsi_worker.cluster.evolve_watch import holder, launch, release, renewed, sweep_evolve, unwatch
from rsi_worker.cluster.sweeper import sweep


def _coord() -> Coordinator:
    return Coordinator(fakeredis.FakeRedis(), lease_s=60)


def _steps(dispatcher: RecordingDispatcher) -> list[Any]:
    return [c.args for c in dispatcher.calls if c.task == TASK_EVOLVE_STEP]


def test_launch_takes_the_lease_once_and_the_step_carries_it(stack: Any) -> None:
    coord, disp = _coord(), RecordingDispatcher()
    lease = launch(coord, disp, "r")
    assert lease is not None and lease.agent == holder("r") == "evolve/r"
    assert _steps(disp) == [[[], "r", lease.agent, lease.token, lease.fence, lease.io]]
    assert launch(coord, disp, "r") is None  # a chain holds it: nothing enqueued twice
    assert len(_steps(disp)) == 1 and coord.client.get(pending_key("evolve/r")) is None
    assert renewed(coord, lease) and renewed(coord, None)


def test_the_sweeper_resumes_a_watched_running_run_whose_lease_is_gone(stack: Any) -> None:
    coord, disp = _coord(), RecordingDispatcher()
    stack.create("r")
    stack.create("idle")
    stack.store.set_run("r", status="running")
    stack.store.set_run("idle", status="running")
    first = launch(coord, disp, "r")
    assert first is not None
    assert sweep_evolve(stack.sessions, coord, disp) == []  # the chain beats: left alone
    coord.client.delete(f"rsi:{holder('r')}:lease")  # no task beat for lease_s
    assert sweep_evolve(stack.sessions, coord, disp) == ["r"]  # "idle" was never launched: not watched
    second = _steps(disp)[-1]
    assert second[3] != first.token and second[4] > first.fence
    assert not renewed(coord, first)  # the old chain's late tasks stop
    report = sweep(stack.sessions, coord, disp, stack.settings)
    assert report.evolve_resumed == 0 and report.actions == 0  # the new chain holds the lease


def test_a_finished_or_inline_run_is_not_resumed(stack: Any) -> None:
    coord, disp = _coord(), RecordingDispatcher()
    stack.create("r")
    stack.store.set_run("r", status="running")
    lease = launch(coord, disp, "r")
    release(coord, lease)
    unwatch(coord, "r")  # rsi evolve run --inline
    assert sweep_evolve(stack.sessions, coord, disp) == []
    stack.store.set_run("r", status="done")
    assert launch(coord, disp, "r") is not None
    coord.client.delete(f"rsi:{holder('r')}:lease")
    assert sweep_evolve(stack.sessions, coord, disp) == []  # not running


def test_an_expired_lease_is_taken_back_unless_a_newer_chain_was_launched(stack: Any) -> None:
    coord, disp = _coord(), RecordingDispatcher()
    lease = launch(coord, disp, "r")
    assert lease is not None
    coord.client.delete(f"rsi:{holder('r')}:lease")  # expired while the step waited in the queue
    assert renewed(coord, lease) and coord.lease_holder(holder("r")) is not None
    coord.client.delete(f"rsi:{holder('r')}:lease")
    newer = launch(coord, disp, "r")
    assert newer is not None and not renewed(coord, lease) and renewed(coord, newer)
