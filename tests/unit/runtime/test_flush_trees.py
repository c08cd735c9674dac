"""R11.3 and R11.7 inline (docs/runtime/failures.md): overlapping children of one tree never hold more
than ``MAX_RUNNING_PER_TREE`` slots (24 turns here, three times the slots; the slot script itself is
driven by 50 sessions in ``test_slots.py``), and a ``FLUSHALL`` across 20 trees gives the undisturbed
results."""

from __future__ import annotations

from collections import deque
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db.runtime_models import SessionRow, SubagentRow
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.llm import ModelRequest, ModelResponse
from rsi_common.runtime import keys
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.tick import tick
from rsi_common.runtime.turns import TurnEnv, TurnOutcome, drain, run_session_turn
from tests.support.runtime_policy import CATALOG, LEAD, RESEARCHER, policy

TREES = 20
SPAWNS = 24


class Nesting:
    """The scripted policy; a researcher's call first runs the next queued turn inside it, so turns
    overlap the way concurrent workers' do (each holds its slot until its call returns)."""

    provider, model = "sim", "sim-1"

    def __init__(self, redis: Any) -> None:
        self.redis, self.env, self.queue = redis, None, deque()  # type: ignore[var-annotated]
        self.peak, self.outcomes = 0, []  # type: ignore[var-annotated]

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.peak = max(self.peak, int(self.redis.zcard(keys.tree_slots("P"))))
        if RESEARCHER in request.system and self.queue:
            self.outcomes.append(run_session_turn(self.env, *self.queue.popleft()))  # type: ignore[arg-type]
        return policy(request)


def _client(engine: Engine, redis: Any, tmp_path: Any) -> RsiClient:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    return RsiClient(settings, engine=engine, redis=redis, dispatcher=RecordingDispatcher())


def test_spawns_beyond_the_slots_stay_within_max_running_per_tree(engine: Engine, fake_redis: Any,
                                                       tmp_path: Any) -> None:
    client = _client(engine, fake_redis, tmp_path)
    model = Nesting(fake_redis)
    params = RuntimeParams(max_live_children=SPAWNS, max_spawns_per_turn=SPAWNS, max_running_per_tree=8)
    env = TurnEnv(client, params, model, lambda a, s: model.queue.append((a, s)))
    model.env = env  # type: ignore[assignment]
    rc = RuntimeClient(client, params=params, wake=env.wake)
    rc.register("P", {"system_parts": [["lead", LEAD]], "subagents": CATALOG})
    rc.start_turn("P", "; ".join(f"topic {i}" for i in range(SPAWNS)))
    out: list[TurnOutcome] = []
    while model.queue:
        out.append(run_session_turn(env, *model.queue.popleft()))
    outcomes = out + model.outcomes
    assert model.peak == 8  # every slot used, never more
    assert sum(o.outcome == "queued" for o in outcomes) > 0  # the 9th running turn had to wait
    with env.factory() as s:
        statuses = list(s.execute(sa.select(SubagentRow.status)).scalars())
        final = s.execute(sa.select(SessionRow).where(SessionRow.agent_id == "P")).scalar_one()
    assert statuses == ["completed"] * SPAWNS and final.pending is None
    assert final.messages[-1]["content"][0]["text"].count("finding on topic") == SPAWNS
    assert fake_redis.zcard(keys.tree_slots("P")) == 0 and fake_redis.llen(keys.tree_waiting("P")) == 0
    client.close()


def _answers(rc: RuntimeClient) -> dict[str, str]:
    with rc.sessions() as s:
        rows = s.execute(sa.select(SessionRow).where(SessionRow.session == "main")).scalars()
        return {r.agent_id: str(r.messages[-1]["content"][0]["text"]) for r in rows}


def test_a_flushall_across_twenty_trees_gives_identical_results(
        engine: Engine, fake_redis: Any, tmp_path: Any) -> None:
    from rsi_common.kernel.testing import ScriptedModel

    client = _client(engine, fake_redis, tmp_path)
    queue: deque[tuple[str, str]] = deque()
    model = ScriptedModel([policy], repeat_last=True, provider="sim", model="sim-1")
    env = TurnEnv(client, RuntimeParams(), model, lambda a, s: queue.append((a, s)))
    rc = RuntimeClient(client, params=env.params, wake=env.wake)
    for t in range(TREES):
        rc.register(f"T{t}", {"system_parts": [["lead", LEAD]], "subagents": CATALOG})
        rc.start_turn(f"T{t}", f"a{t}; b{t}")
    drain(env, deque(queue.popleft() for _ in range(TREES)))  # every lead spawns two children, yields
    children = [queue.popleft() for _ in range(2 * TREES)]  # tree t: children 2t (a) and 2t + 1 (b)
    # before the flush: both children of the even trees, only the first of the odd trees
    drain(env, deque(c for i, c in enumerate(children) if i % 2 == 0 or (i // 2) % 2 == 0))
    queue.clear()  # the pending wakes are lost with the broker's and Redis's state
    fake_redis.flushall()
    report = tick(env)
    assert report.orphaned == TREES // 2  # the odd trees' second children: spawn inputs found in SQL
    assert sorted(a for a, s in report.woken if s == "main") == sorted(
        f"T{t}" for t in range(0, TREES, 2))  # the even trees' leads: every child settled
    drain(env, queue)
    assert _answers(rc) == {f"T{t}": f"summary: finding on a{t}; finding on b{t}" for t in range(TREES)}
    with env.factory() as s:
        assert sorted(set(s.execute(sa.select(SubagentRow.status)).scalars())) == ["completed"]
    assert all(rc.tree(f"T{t}")["spend"]["spawns"] == 2 for t in (0, TREES - 1))
    client.close()


def test_a_wake_whose_message_was_lost_is_redone_once_its_mark_is_stale(
        engine: Engine, fake_redis: Any, tmp_path: Any) -> None:
    """A worker killed between the broker's pop and its unacked record loses the message and leaves
    the wake mark: a fresh mark is trusted, a stale one (``STALE_WAKE_S``) is redone by the tick."""
    from rsi_common.kernel.testing import ScriptedModel
    from rsi_common.runtime.waits import STALE_WAKE_S

    client = _client(engine, fake_redis, tmp_path)
    queue: deque[tuple[str, str]] = deque()
    model = ScriptedModel([policy], repeat_last=True, provider="sim", model="sim-1")
    env = TurnEnv(client, RuntimeParams(), model, lambda a, s: queue.append((a, s)))
    rc = RuntimeClient(client, params=env.params, wake=env.wake)
    rc.register("P", {"system_parts": [["lead", LEAD]], "subagents": CATALOG})
    rc.start_turn("P", "a")
    drain(env, deque([queue.popleft()]))  # the lead spawns its child and yields
    (child,) = list(queue)
    queue.clear()  # the child's task is lost; its mark stays
    mark = keys.wake(*child)
    fake_redis.set(mark, "1", ex=keys.WAKE_TTL_S - STALE_WAKE_S + 5)
    assert child not in tick(env).woken and not queue
    fake_redis.expire(mark, keys.WAKE_TTL_S - STALE_WAKE_S - 1)
    assert child in tick(env).woken
    drain(env, queue)
    assert _answers(rc) == {"P": "summary: finding on a"}
    client.close()
