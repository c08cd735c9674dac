"""Run heartbeats (``rsi_worker/cluster/heartbeat.py``): a registered task renews its run's lease; a
lost lease stops its beats; a task that names no run is never registered. Beats are driven by hand
(no waiting on the heartbeat thread)."""

from __future__ import annotations

import time
from pathlib import Path

from rsi_common.config import Settings
from rsi_common.coord import lease_key
from rsi_worker.cluster.heartbeat import Heartbeat, interval_s
from rsi_worker.cluster.middleware import Policy, TaskCall
from rsi_worker.cluster.worker import WorkerContext

POLICY = Policy(capped=lambda call: None)


def test_a_long_task_keeps_its_lease_alive_until_the_lease_is_lost(tmp_path: Path) -> None:
    ctx = WorkerContext(Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'rsi.db'}", lease_s=30))
    coord = ctx.runtime().coord
    lease = coord.try_begin("shop", "io1")
    assert lease is not None
    hb = Heartbeat(ctx)
    assert hb.interval == interval_s(30) == 10
    hb.interval = 3600  # the daemon loop never finds a beat due: only the test's beats count
    call = TaskCall("rsi.consolidate", "t1", {"agent": "shop", "io": "io1", "token": lease.token,
                                               "fence": lease.fence})
    assert hb.before(call, POLICY) is None
    (beat,) = hb._active.values()
    coord.client.pexpire(lease_key("shop"), 10_000)  # a third of lease_s left
    hb.beat(beat, time.monotonic())
    assert coord.client.pttl(lease_key("shop")) > 20_000 and not beat.lost  # renewed to lease_s
    coord.client.set(lease_key("shop"), "someone-else")
    hb.beat(beat, time.monotonic())
    assert beat.lost and hb.beats == 2  # the next loop skips it
    hb.after(call)
    assert not hb._active
    hb.before(TaskCall("rsi.sweep", "t2", {}), POLICY)  # no run, no lease: nothing to keep alive
    assert not hb._active
    ctx.reset()
