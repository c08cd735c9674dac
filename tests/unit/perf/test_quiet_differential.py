"""The no-signal fast path decides exactly as the full path (rsi_worker/consolidate/quiet.py,
docs/performance/consolidation.md#the-no-signal-path): random pools of signals and random ``seen``
states, each decided by ``quiet.decide`` and by the full path's opening (``open_row`` +
``open_step``) on the same lease; the fast path either declines or gives the full path's decision."""

from __future__ import annotations

import random
from typing import Any

import pytest
import sqlalchemy as sa

from rsi_common.db.models import AgentRow
from rsi_worker.consolidate import quiet
from rsi_worker.consolidate.opening import open_row, open_step
from rsi_worker.consolidate.state import ConsolidationState, signal_digest
from tests.support.pipeline import Stack

SIGNALS: list[dict[str, Any] | None] = [
    None, None, None, {"stars": 5}, {"stars": 4}, {"stars": 3}, {"stars": 1}, {"issue": "none"},
    {"issue": "the price is wrong"}, {"expected": "42"}, {"criteria": ["Cite the source."]},
    {"criteria": ["  "]}, {"stars": 5, "comment": "great"},
]
TOPICS = ("laptops", "phones", "monitors")
SCENARIOS = 12


@pytest.fixture
def stack(small_pool_stack: Stack) -> Stack:
    """The conftest's stack with a 5-world pool: older worlds leave the window soon."""
    return small_pool_stack


def _scenario(stack: Stack, rng: random.Random, agent: str) -> tuple[Any, Any]:
    """A random agent: 3–5 turns (a conversation sometimes continued, sometimes a signal given),
    a random ``seen`` state (true, stale or missing digests); the fast and the full decision."""
    turns, convs = [], 0
    for i in range(rng.randint(3, 5)):
        if convs and rng.random() < 0.15:
            conv = f"c{rng.randint(1, convs)}"
        else:
            convs += 1
            conv = f"c{convs}"
        text = f"Compare {TOPICS[i % len(TOPICS)]}: use search query={TOPICS[i % len(TOPICS)]}"
        signals = rng.choice(SIGNALS) if i < 4 else None
        turns.append((stack.say(agent, conv, text, signals), signals))
    state = ConsolidationState.from_json(None)
    with stack.sessions() as s:
        for turn, signals in turns:
            if signals and rng.random() < 0.6:  # seen as it is now, or as it was before a change
                wid = stack.world_id(agent, turn)
                state.seen[wid] = signal_digest(signals) if rng.random() < 0.7 else "stale"
        s.execute(sa.update(AgentRow).where(AgentRow.id == agent).values(state=state.to_json()))
        s.commit()
    last = turns[-1][0]
    lease = stack.lease(agent, last.world["io_id"] if last.world else "")
    fast = quiet.decide(stack.deps, lease)  # nothing written
    ctx, running = open_row(stack.deps, lease)
    assert running
    full = open_step(stack.deps, ctx)
    stack.coord.finish(lease)
    return fast, full


@pytest.mark.parametrize("seed", [15])
def test_quiet_decision_equals_the_full_path_on_random_pools(stack: Stack, seed: int) -> None:
    rng = random.Random(seed)
    decided = declined_rounds = 0
    for n in range(SCENARIOS):
        fast, full = _scenario(stack, rng, f"agent{n}")
        if full.kind == "trials":  # a round: the fast path must have declined
            assert fast is None, (n, fast.result.reason if fast and fast.result else None)
            declined_rounds += 1
            continue
        if fast is None:  # an unread pair (the reader must read it): the full path decides
            continue
        decided += 1
        assert full.kind == "final" and fast.kind == "final" and fast.result and full.result
        assert (fast.result.status, fast.result.reason) == (full.result.status, full.result.reason), n
        assert fast.ctx.loaded == full.ctx.loaded and fast.ctx.digests == full.ctx.digests, n
        assert fast.ctx.skipped_worlds == full.ctx.skipped_worlds, n
        assert (fast.ctx.latest, fast.ctx.provider, fast.ctx.model, fast.ctx.start_version) == (
            full.ctx.latest, full.ctx.provider, full.ctx.model, full.ctx.start_version), n
    assert decided >= 4 and declined_rounds >= 2, (decided, declined_rounds)  # both kinds were tried


def test_an_accepted_answer_is_read_once_per_process(stack: Stack) -> None:
    """The record of an accepted world is read by the first quiet run that needs its answer; later
    runs decide from the memo (the pool read alone), with the full path's reasons."""
    from rsi_worker.bench.ingest import StatementCounter
    from rsi_worker.consolidate import flow

    stack.say("memo", "c0", "Compare laptops: use search query=laptops", {"stars": 5})
    reasons, reads = [], []
    for n in range(1, 4):
        turn = stack.say("memo", f"c{n}", "Compare phones: use search query=phones")
        lease = stack.lease("memo", turn.world["io_id"] if turn.world else "")
        counter = StatementCounter(stack.engine)
        try:
            nxt = flow.open_run(stack.deps, lease)
            assert nxt.quiet is not None and nxt.result is not None
            reads.append(counter.kinds.get("SELECT rsi_worlds", 0))
        finally:
            counter.close()
        result, _ = flow.close(stack.deps, nxt)
        assert result is not None
        reasons.append(result.reason)
    assert reasons == ["new signals only confirm the current answers",
                       "no new correction or problem to fix", "no new correction or problem to fix"]
    assert reads[0] == 2 and reads[1:] == [1, 1], reads  # pool + record, then the pool alone
