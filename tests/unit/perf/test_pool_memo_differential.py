"""The no-signal fast path with its per-process pool memo decides exactly as the full path
(rsi_worker/consolidate/pool_memo.py, docs/performance/consolidation.md#the-no-signal-path): one agent
through a random sequence of turns, signal changes (of worlds in and out of the window), taints,
deletes and retention — written through another engine too (another process) — with the memo going
stale by several writes; each run decided by ``quiet.decide`` (memo warm) and by the full path's
opening on the same lease."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
import sqlalchemy as sa

from rsi_common.db import make_engine, retain_worlds, session_factory, update_signals
from rsi_common.db.models import WorldRow
from rsi_worker.consolidate import quiet
from rsi_worker.consolidate.opening import open_row, open_step
from tests.support.pipeline import Stack

SIGNALS: list[dict[str, Any] | None] = [
    None, None, None, None, {"stars": 5}, {"stars": 4}, {"stars": 1}, {"issue": "the price is wrong"},
    {"expected": "42"}, {"criteria": ["Cite the source."]},
]
TOPICS = ("laptops", "phones", "monitors")
STEPS = 24


@pytest.fixture
def stack(small_pool_stack: Stack) -> Stack:
    """The conftest's stack with a 5-world pool: older worlds leave the window soon."""
    return small_pool_stack


def _write(stack: Stack, other: Any, rng: random.Random) -> None:
    """One random write to the agent's worlds, through this engine or another."""
    factory = rng.choice([stack.sessions, other])
    with factory.begin() as s:
        ids = [r.id for r in s.execute(sa.select(WorldRow.id).where(WorldRow.agent_id == "seq")
                                       .order_by(WorldRow.clock.desc()))]
        op = rng.random()
        if op < 0.5:
            update_signals(s, "seq", rng.choice(SIGNALS) or {}, world_id=rng.choice(ids), replace=True)
        elif op < 0.7:
            s.execute(sa.update(WorldRow).where(WorldRow.id == rng.choice(ids))
                      .values(tainted=rng.random() < 0.6))
        elif op < 0.85:
            s.execute(sa.delete(WorldRow).where(WorldRow.id == rng.choice(ids[:7])))
        else:
            retain_worlds(s, "seq", rng.randint(4, 9))


@pytest.mark.parametrize("seed", [16])
def test_quiet_decisions_with_the_pool_memo_equal_the_full_path(stack: Stack, seed: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    reads: Counter[str] = Counter()
    plain_rows = quiet.rows

    def counted(conn: Any, name: str, params: Mapping[str, Any]) -> Any:
        reads[name] += 1
        return plain_rows(conn, name, params)

    monkeypatch.setattr(quiet, "rows", counted)
    other_engine = make_engine(stack.settings.database_url)
    other = session_factory(other_engine)
    decided = 0
    try:
        for i in range(STEPS):
            if i > 3:
                for _ in range(rng.choice([0, 1, 1, 2, 3])):
                    _write(stack, other, rng)
            topic = TOPICS[i % len(TOPICS)]
            conv = f"c{rng.randint(1, i)}" if i and rng.random() < 0.1 else f"c{i + 1}"
            turn = stack.say("seq", conv, f"Compare {topic}: use search query={topic}",
                             rng.choice(SIGNALS) if rng.random() < 0.3 else None)
            lease = stack.lease("seq", turn.world["io_id"] if turn.world else "")
            fast = quiet.decide(stack.deps, lease)  # nothing written
            ctx, running = open_row(stack.deps, lease)
            assert running
            full = open_step(stack.deps, ctx)
            stack.coord.finish(lease)
            if full.kind == "trials":
                assert fast is None, i
                continue
            if fast is None:
                continue
            decided += 1
            assert full.result and fast.result
            assert (fast.result.status, fast.result.reason) == (full.result.status, full.result.reason), i
            assert fast.ctx.loaded == full.ctx.loaded and fast.ctx.digests == full.ctx.digests, i
            assert fast.ctx.skipped_worlds == full.ctx.skipped_worlds, i
            assert (fast.ctx.latest, fast.ctx.provider, fast.ctx.model) == (
                full.ctx.latest, full.ctx.provider, full.ctx.model), i
    finally:
        other_engine.dispose()
    assert decided >= 6, decided
    assert reads["changed"] >= 8 and reads["pool"] >= 2, reads  # the memo was used, and refused
