"""A trial's cancel callback (rsi_worker/consolidate/trials.py,
docs/performance/consolidation.md#a-trials-cost): the first check after the trial's renewal is
answered from the flag that renewal read; every later check reads the flag again, so a cancel set
after the renewal stops the replay at its next check."""

from __future__ import annotations

from types import SimpleNamespace

import fakeredis

from rsi_common.config import Settings
from rsi_common.coord import Coordinator, cancel_key
from rsi_worker.consolidate.context import RoundContext
from rsi_worker.consolidate.evaluate import INCUMBENT
from rsi_worker.consolidate.trials import _Heartbeat


class _Counting(Coordinator):
    def __init__(self, client: fakeredis.FakeRedis) -> None:
        super().__init__(client, lease_s=600)
        self.reads = 0

    def is_cancelled(self, run: str, cand: str) -> bool:
        self.reads += 1
        return super().is_cancelled(run, cand)


def _beat(candidate: str, *, fresh: bool) -> tuple[_Heartbeat, _Counting, fakeredis.FakeRedis]:
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    coord = _Counting(client)
    deps = SimpleNamespace(settings=Settings(lease_s=600), coord=coord)
    ctx = RoundContext("run1", "a1", 1, "tok", "io1")
    return _Heartbeat(deps, ctx, candidate, fresh=fresh), coord, client  # type: ignore[arg-type]


def test_the_first_check_uses_the_renewals_read_and_a_later_cancel_is_seen() -> None:
    beat, coord, client = _beat("A", fresh=True)
    client.set(cancel_key("run1", "A"), 1)  # cancelled after the renewal read the flag
    assert beat() is False and coord.reads == 0  # before the first model call: the renewal's read
    assert beat() is True and coord.reads == 1  # the next check reads the flag


def test_without_a_fresh_read_every_check_reads_the_flag() -> None:
    beat, coord, client = _beat("A", fresh=False)
    assert beat() is False and coord.reads == 1
    client.set(cancel_key("run1", "A"), 1)
    assert beat() is True and coord.reads == 2
    incumbent, coord, _ = _beat(INCUMBENT, fresh=False)
    assert incumbent() is False and coord.reads == 0  # the incumbent is never cancelled
