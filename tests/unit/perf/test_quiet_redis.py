"""One Redis round trip for a quiet run's lease renewal and spend read
(``Coordinator.renew_and_spend``, ``spend.renew_over_cap``;
docs/performance/consolidation.md#the-no-signal-path): the same answers as ``renew`` and
``over_cap``, a cap reached still sends the run to the full path."""

from __future__ import annotations

import fakeredis

from rsi_common.coord import Coordinator, Lease
from rsi_worker.consolidate import quiet
from rsi_worker.consolidate.spend import over_cap, renew_over_cap, today
from tests.support.pipeline import Stack


def test_renew_and_spend_answers_like_renew_and_spend() -> None:
    coord = Coordinator(fakeredis.FakeRedis(server=fakeredis.FakeServer()), lease_s=30)
    lease = coord.try_begin("a", "io-1")
    assert lease is not None
    day = today()
    assert coord.renew_and_spend(lease, day) == (True, (0, 0))
    coord.spend_add("a", 120, day)
    coord.spend_add("b", 30, day)
    both = coord.renew_and_spend(lease, day)
    assert both == (coord.renew(lease), coord.spend("a", day)) == (True, (120, 150))
    stolen = Lease("a", "not-the-token", lease.fence, "io-1")
    assert coord.renew_and_spend(stolen, day) == (False, (120, 150))
    assert coord.renew(stolen) is False


def test_renew_over_cap_matches_over_cap_and_a_capped_quiet_run_takes_the_full_path(stack: Stack) -> None:
    turn = stack.say("shop", "c1", "Compare laptops: use search query=laptops")
    lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
    assert renew_over_cap(stack.deps, lease) == (True, None) and over_cap(stack.deps, "shop") is None
    cap = stack.deps.params.agent_daily_tokens
    assert cap > 0
    stack.coord.spend_add("shop", cap, today())
    renewed, spend = renew_over_cap(stack.deps, lease)
    assert renewed is True and spend is not None and spend == over_cap(stack.deps, "shop")
    assert quiet.decide(stack.deps, lease) is None  # the full path stops it with its reason
    stack.coord.finish(lease)
    assert renew_over_cap(stack.deps, lease)[0] is False
