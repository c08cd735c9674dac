"""The tick after a Redis flush and at a child's timeout (docs/runtime/failures.md)."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db.runtime_models import AgentRuntimeRow, EventRow, SessionRow, SubagentRow
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.kernel.testing import ScriptedModel
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.tick import tick
from rsi_common.runtime.turns import TurnEnv, drain
from tests.support.runtime_policy import CATALOG, LEAD, policy

TREES = 4



@pytest.fixture
def env(engine: Engine, fake_redis: Any, tmp_path: Any) -> Any:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    client = RsiClient(settings, engine=engine, redis=fake_redis, dispatcher=RecordingDispatcher())
    queue: deque[tuple[str, str]] = deque()
    model = ScriptedModel([policy], repeat_last=True, provider="sim", model="sim-1")
    turn_env = TurnEnv(client, RuntimeParams(), model, lambda a, s: queue.append((a, s)))
    yield turn_env, queue, RuntimeClient(client, params=turn_env.params, wake=turn_env.wake)
    client.close()


def _answers(rc: RuntimeClient) -> dict[str, str]:
    with rc.sessions() as s:
        rows = s.execute(sa.select(SessionRow).where(SessionRow.session == "main")).scalars()
        return {r.agent_id: str(r.messages[-1]["content"][0]["text"]) for r in rows}


def test_a_flushall_mid_tree_gives_the_same_results(env: Any, fake_redis: Any) -> None:
    turn_env, queue, rc = env
    for t in range(TREES):
        rc.register(f"T{t}", {"system_parts": [["lead", LEAD]], "subagents": CATALOG})
        rc.start_turn(f"T{t}", f"a{t}; b{t}")
    leads = [queue.popleft() for _ in range(TREES)]
    for lead in leads:  # each lead spawns two children and yields
        (out,) = drain(turn_env, deque([lead]))
        assert out.status == "suspended"
    queue.clear()  # the children's wakes are lost with the broker's and Redis's state
    fake_redis.flushall()
    report = tick(turn_env)
    assert report.orphaned == 2 * TREES and report.overdue == 0
    drain(turn_env, queue)
    assert _answers(rc) == {f"T{t}": f"summary: finding on a{t}; finding on b{t}" for t in range(TREES)}
    assert rc.tree("T0")["spend"]["spawns"] == 2


def test_the_tick_cancels_a_child_past_its_timeout_and_wakes_the_parent(env: Any, fake_redis: Any) -> None:
    turn_env, queue, rc = env
    rc.register("T0", {"system_parts": [["lead", LEAD]], "subagents": CATALOG})
    rc.start_turn("T0", "a; b")
    drain(turn_env, deque([queue.popleft()]))
    queue.clear()
    turn_env.params = RuntimeParams(child_timeout_s=1)
    with rc.sessions.begin() as s:
        s.execute(sa.update(SubagentRow).values(created_at=sa.func.datetime("now", "-1 hour")))
    report = tick(turn_env)
    assert report.timed_out == 2 and ("T0", "main") in report.woken
    assert all(fake_redis.get(f"rsi:sa:{h}:cancel") == b"1" for h in rc.tree("T0")["tree"]["handles"]
               for h in [h["handle"]])
    drain(turn_env, queue)
    (handles,) = [rc.tree("T0")["tree"]["handles"]]
    assert [h["status"] for h in handles] == ["cancelled", "cancelled"]
    assert _answers(rc)["T0"] == "summary: cancelled; cancelled"


def test_idle_to_inactive_then_a_message_restores_the_agent(env: Any, fake_redis: Any) -> None:
    turn_env, queue, rc = env
    rc.register("T0", {"system_parts": [["lead", LEAD]]})
    rc.start_turn("T0", "hello")
    drain(turn_env, queue)
    assert rc.lifecycle("T0") == "idle"
    turn_env.params = RuntimeParams(idle_evict_s=1)
    fake_redis.set("rsi:T0:wake:main", "1")
    with rc.sessions.begin() as s:
        s.execute(sa.update(AgentRuntimeRow).values(updated_at=sa.func.datetime("now", "-1 hour")))
    assert tick(turn_env).evicted == 1
    assert rc.lifecycle("T0") == "inactive" and not fake_redis.exists("rsi:T0:wake:main")
    rc.start_turn("T0", "again")
    drain(turn_env, queue)
    with rc.sessions() as s:
        moves = [(e.detail["from"], e.detail["to"]) for e in s.execute(
            sa.select(EventRow).where(EventRow.agent_id == "T0", EventRow.kind == "lifecycle",
                                      EventRow.detail.is_not(None)).order_by(EventRow.id)).scalars()
                 if "from" in e.detail]
    assert moves == [("admitted", "running"), ("running", "idle"), ("idle", "inactive"),
                     ("inactive", "admitted"), ("admitted", "running"), ("running", "idle")]
