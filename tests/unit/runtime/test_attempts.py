"""Crashed turn attempts (docs/runtime/failures.md): expired-lease recovery, ``MAX_TURN_ATTEMPTS`` →
``worker_lost``, ``lost:`` charges, and ``at_most_once`` + crash → ``UNCERTAIN_SIDE_EFFECT``.

A crash is a :class:`BaseException` raised by the model mid-turn: nothing is committed and the attempt's
record stays, as when a worker dies (the test's lease is released by the ``finally`` a killed process
never runs; recovery only needs it gone)."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db.runtime_models import AgentRuntimeRow, EventRow, SpendRow, SubagentRow
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.kernel.types import ToolDef
from rsi_common.llm import ModelRequest, ModelResponse, Usage
from rsi_common.runtime import attempts, keys
from rsi_common.runtime.caps import resolve_caps
from rsi_common.runtime.effects import UNCERTAIN, started
from rsi_common.runtime.messages import Sender, send
from rsi_common.runtime.tick import tick
from rsi_common.runtime.toolsets import Toolset, register_toolset
from rsi_common.runtime.tree import AgentProfile, register
from rsi_common.runtime.turns import TurnEnv, TurnOutcome, run_session_turn
from tests.support.runtime_policy import LEAD, RESEARCHER, policy

CATALOG = {"researcher": {"description": "finds one source", "tools": ["pay"], "max_iterations": 4,
                          "instructions": RESEARCHER}}
FAR = 10**13  # a clock past every lease and backoff (ms)


class Crash(BaseException):
    """A worker dying mid-call."""


class Model:
    """The scripted lead of ``runtime_policy``; its researcher calls ``pay`` first when ``pays``, and its
    model call crashes while ``crashes`` remain (after ``pay`` ran, if it pays)."""

    provider, model = "sim", "sim-1"

    def __init__(self, crashes: int, pays: bool) -> None:
        self.crashes, self.pays = crashes, pays

    def complete(self, request: ModelRequest) -> ModelResponse:
        if RESEARCHER not in request.system:
            return policy(request)
        usage = Usage(input_tokens=10, output_tokens=2)
        last = request.messages[-1]["content"]
        paid = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        if self.pays and not paid:
            return ModelResponse(content=[{"type": "tool_use", "id": "p1", "name": "pay", "input": {}}],
                                 usage=usage, stop_reason="tool_use", model="sim-1")
        if self.crashes:
            self.crashes -= 1
            raise Crash
        return ModelResponse(content=[{"type": "text", "text": "bought"}], usage=usage,
                             stop_reason="end_turn", model="sim-1")


@pytest.fixture
def paid() -> list[str]:
    calls: list[str] = []
    register_toolset("shop", Toolset(tools=(ToolDef("pay", "Pay once.", executor=lambda a: calls.append("x")
                                                    or "paid"),), at_most_once=frozenset({"pay"})))
    return calls


def _env(engine: Engine, redis: Any, tmp_path: Any, model: Model, **params: Any) -> Any:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    client = RsiClient(settings, engine=engine, redis=redis, dispatcher=RecordingDispatcher())
    queue: deque[tuple[str, str]] = deque()
    env = TurnEnv(client, RuntimeParams(**params), model, lambda a, s: queue.append((a, s)))
    with env.factory.begin() as s:
        register(s, "P", AgentProfile(system_parts=(("lead", LEAD),), subagents=CATALOG, toolset="shop",
                                      tools=("pay",)))
        send(s, redis, env.params, resolve_caps(env.params), Sender(None, io="op1"), "P", "topic 0")
    queue.append(("P", "main"))
    return env, queue, client


def _run(env: TurnEnv, queue: deque[tuple[str, str]]) -> tuple[list[TurnOutcome], int]:
    """Drain the queue; a crash ends that delivery (the broker would redeliver; recovery re-enqueues)."""
    out, crashes = [], 0
    while queue:
        agent, session = queue.popleft()
        try:
            out.append(run_session_turn(env, agent, session))
        except Crash:
            crashes += 1
    return out, crashes


def _state(env: TurnEnv) -> tuple[SubagentRow, list[str], dict[str, str]]:
    with env.factory() as s:
        handle = s.execute(sa.select(SubagentRow)).scalar_one()
        spend = sorted(s.execute(sa.select(SpendRow.key).where(SpendRow.kind == "lost")).scalars())
        lifecycles = {r.agent_id: r.lifecycle for r in s.execute(sa.select(AgentRuntimeRow)).scalars()}
    return handle, spend, lifecycles


def test_an_expired_lease_is_re_enqueued_charged_lost_and_the_rerun_completes(
        engine: Engine, fake_redis: Any, tmp_path: Any, paid: list[str]) -> None:
    env, queue, client = _env(engine, fake_redis, tmp_path, Model(crashes=1, pays=False))
    outcomes, crashes = _run(env, queue)
    assert crashes == 1 and fake_redis.zcard(keys.INFLIGHT) == 1
    assert attempts.recover_expired(env, now_ms=0).requeued == []  # lease expiry + 0.25 s not reached
    report = attempts.recover_expired(env, now_ms=FAR)
    assert [a for a, _ in report.requeued] == ["P.researcher"]
    assert report.lost_charged == 1 and report.failed == []
    assert attempts.recover_expired(env, now_ms=FAR).requeued == []  # claimed once
    outcomes, crashes = _run(env, queue)
    assert crashes == 0 and outcomes[-1].answer == "summary: bought"
    handle, lost, lifecycles = _state(env)
    assert (handle.status, handle.answer) == ("completed", "bought")
    assert lost == [f"lost:P.researcher:{handle.id}:1:1"]
    with env.factory() as s:
        tokens = s.execute(sa.select(SpendRow.tokens).where(SpendRow.kind == "lost")).scalar_one()
    assert tokens == env.params.turn_reserve_tokens  # the whole reservation of the crashed attempt
    assert fake_redis.zcard(keys.INFLIGHT) == 0 and lifecycles["P.researcher"] == "idle"
    client.close()


def test_max_turn_attempts_crashes_fail_the_handle_and_the_agent_worker_lost(
        engine: Engine, fake_redis: Any, tmp_path: Any, paid: list[str]) -> None:
    env, queue, client = _env(engine, fake_redis, tmp_path, Model(crashes=5, pays=False), max_turn_attempts=2)
    _, crashes = _run(env, queue)
    assert crashes == 1
    assert len(attempts.recover_expired(env, now_ms=FAR).requeued) == 1  # woken: on the queue
    _, crashes = _run(env, queue)  # attempt 2 crashes too
    assert crashes == 1
    report = attempts.recover_expired(env, now_ms=FAR)
    assert report.requeued == [] and len(report.failed) == 1 and report.lost_charged == 1
    assert list(queue) == [("P", "main")]  # the parent's wait is woken
    outcomes, _ = _run(env, queue)
    assert outcomes[-1].answer == "summary: failed"
    handle, lost, lifecycles = _state(env)
    assert (handle.status, handle.error) == ("failed", attempts.WORKER_LOST)
    assert lost == [f"lost:P.researcher:{handle.id}:1:{n}" for n in (1, 2)]
    assert lifecycles == {"P": "idle", "P.researcher": "failed"}
    # a failed agent runs nothing until restore; a redelivered turn of its session is a no-op
    assert run_session_turn(env, "P.researcher", handle.id).outcome == "failed"
    client.close()


def test_a_redelivery_before_the_tick_charges_the_crashed_attempt_once(
        engine: Engine, fake_redis: Any, tmp_path: Any, paid: list[str]) -> None:
    env, queue, client = _env(engine, fake_redis, tmp_path, Model(crashes=1, pays=False))
    _run(env, queue)
    with env.factory() as s:
        handle = s.execute(sa.select(SubagentRow)).scalar_one()
    queue.append(("P.researcher", handle.id))  # the broker's redelivery comes first
    outcomes, crashes = _run(env, queue)
    assert crashes == 0 and outcomes[-1].answer == "summary: bought"
    report = attempts.recover_expired(env, now_ms=FAR)
    assert report.requeued == [] and report.lost_charged == 0
    assert _state(env)[1] == [f"lost:P.researcher:{handle.id}:1:1"]
    client.close()


def test_at_most_once_and_a_crash_give_uncertain_side_effect(
        engine: Engine, fake_redis: Any, tmp_path: Any, paid: list[str]) -> None:
    env, queue, client = _env(engine, fake_redis, tmp_path, Model(crashes=1, pays=True))
    _, crashes = _run(env, queue)
    assert crashes == 1 and paid == ["x"]
    assert len(attempts.recover_expired(env, now_ms=FAR).requeued) == 1  # woken: on the queue
    outcomes, crashes = _run(env, queue)
    failed = [o for o in outcomes if o.outcome == "failed"]
    assert crashes == 0 and [(o.status, o.answer) for o in failed] == [("failed", UNCERTAIN)]
    assert paid == ["x"]  # the tool never ran twice
    handle, _, lifecycles = _state(env)
    assert (handle.status, handle.error) == ("failed", UNCERTAIN)
    assert started(fake_redis, "P.researcher", f"{handle.id}:1") == ["p1:pay"]
    assert outcomes[-1].answer == "summary: failed" and lifecycles["P.researcher"] == "idle"
    with env.factory() as s:
        events = [e.detail for e in s.execute(sa.select(EventRow).where(EventRow.kind == "turn_failed"))
                  .scalars()]
    assert events == [{"io": f"{handle.id}:1", "error": UNCERTAIN}]
    client.close()


def test_a_completed_at_most_once_call_is_journaled_and_not_uncertain(
        engine: Engine, fake_redis: Any, tmp_path: Any, paid: list[str]) -> None:
    env, queue, client = _env(engine, fake_redis, tmp_path, Model(crashes=0, pays=True))
    outcomes, _ = _run(env, queue)
    assert outcomes[-1].answer == "summary: bought" and paid == ["x"]
    handle = _state(env)[0]
    assert started(fake_redis, "P.researcher", f"{handle.id}:1") == ["p1:pay"]
    assert json.loads(json.dumps(handle.answer)) == "bought"
    client.close()


def test_the_keeper_renews_a_live_lease_and_its_slot_but_not_a_lost_one(fake_redis: Any) -> None:
    keeper = attempts.LeaseKeeper(fake_redis, background=False)  # no daemon pass between the
    # test's own steps: the renewals counted below are its own
    fake_redis.set("rsi:A:turn:main", "tok", px=30_000)
    fake_redis.zadd("rsi:tree:A:slots", {"A|main": 1})
    fake_redis.zadd(keys.INFLIGHT, {"A|main": 1, "B|main": 1})
    live = keeper.add("rsi:A:turn:main", "tok", "rsi:tree:A:slots", "A|main", 60_000)
    keeper.add("rsi:B:turn:main", "tok", "rsi:tree:B:slots", "B|main", 60_000)  # its lease is gone
    for e in keeper._entries.values():
        e.renewed -= 60
    assert keeper.renew_due() == 1
    assert fake_redis.pttl("rsi:A:turn:main") > 30_000
    assert fake_redis.zscore("rsi:tree:A:slots", "A|main") > 1
    assert fake_redis.zscore(keys.INFLIGHT, "A|main") > 1
    assert fake_redis.zscore(keys.INFLIGHT, "B|main") == 1
    keeper.remove(live)
    assert list(keeper._entries) == [2]


def test_a_yielded_slice_whose_world_was_stored_before_the_crash_still_waits(
        engine: Engine, fake_redis: Any, tmp_path: Any, paid: list[str]) -> None:
    """The world does not hold the pending wait: a re-run of a yielded io runs the slice again (its
    spawns return the first handles) instead of committing a turn that forgot its wait."""
    env, queue, client = _env(engine, fake_redis, tmp_path, Model(crashes=0, pays=False))
    record = client.record_turn

    def record_then_crash(agent: str, result: Any) -> Any:
        out = record(agent, result)
        if agent == "P" and client.record_turn is record_then_crash:
            client.record_turn = record  # type: ignore[method-assign]
            raise Crash
        return out

    client.record_turn = record_then_crash  # type: ignore[method-assign]
    _, crashes = _run(env, queue)
    assert crashes == 1
    queue.append(("P", "main"))  # the redelivery
    (again,) = _run(env, queue)[0]
    assert (again.io, again.status) == ("main:1", "suspended")  # it waits again, not a finished turn
    tick(env)  # the child spawned by the crashed attempt was never woken: its mailbox is
    outcomes, _ = _run(env, queue)
    assert outcomes[-1].answer == "summary: bought"
    with env.factory() as s:
        assert s.execute(sa.select(sa.func.count()).select_from(SubagentRow)).scalar_one() == 1
    client.close()
