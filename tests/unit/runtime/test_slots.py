"""Tree slots (docs/runtime/README.md#turns): at most MAX_RUNNING_PER_TREE turns of a tree run at once;
the rest wait in FIFO order and each release hands the slot to the next."""

from __future__ import annotations

from typing import Any

from rsi_common.runtime import keys
from rsi_common.runtime.turns import _RELEASE, _SLOT


def test_fifty_sessions_share_eight_slots_in_arrival_order(fake_redis: Any) -> None:
    slot, release = fake_redis.register_script(_SLOT), fake_redis.register_script(_RELEASE)
    ks = [keys.tree_slots("R"), keys.tree_waiting("R")]
    members = [f"R.worker|sa_{i:02d}" for i in range(50)]
    now = 1_000_000
    granted = [m for m in members if slot(keys=ks, args=[m, now, 60_000, 8])]
    assert granted == members[:8]
    assert slot(keys=ks, args=[members[3], now, 60_000, 8]) == 1  # a holder renews its own slot
    assert slot(keys=ks, args=[members[20], now, 60_000, 8]) == 0  # queued once, not twice
    assert fake_redis.llen(ks[1]) == 42
    running, order = list(granted), []
    while running:
        done = running.pop(0)
        nxt = release(keys=ks, args=[done])
        if nxt:
            nxt = nxt.decode()
            order.append(nxt)
            assert slot(keys=ks, args=[nxt, now, 60_000, 8]) == 1
            running.append(nxt)
        assert fake_redis.zcard(ks[0]) <= 8
    assert order == members[8:]
    assert fake_redis.zcard(ks[0]) == 0 and fake_redis.llen(ks[1]) == 0


def test_an_expired_slot_of_a_dead_turn_is_reclaimed(fake_redis: Any) -> None:
    slot = fake_redis.register_script(_SLOT)
    ks = [keys.tree_slots("R"), keys.tree_waiting("R")]
    assert slot(keys=ks, args=["dead|s1", 1_000, 5_000, 1]) == 1
    assert slot(keys=ks, args=["live|s2", 2_000, 5_000, 1]) == 0
    assert slot(keys=ks, args=["live|s2", 7_000, 5_000, 1]) == 1  # the dead turn's lease expired
