"""Host sub-agent calls of :class:`RuntimeClient` (docs/runtime/README.md#host-api): spawn with a
retry key, wait (BLPOP on done marks, re-reading SQL), catalog edits; on SQLite and fakeredis."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db.runtime_models import AgentRuntimeRow, EventRow, MessageRow, SpendRow, SubagentRow
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import InvalidInput, UnknownAgentError
from rsi_common.kernel.testing import ScriptedModel
from rsi_common.runtime import keys
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.subagents import RuntimeRefusal
from rsi_common.runtime.turns import TurnEnv, drain
from tests.support.runtime_policy import CATALOG, LEAD, policy


@pytest.fixture
def env(engine: Engine, fake_redis: Any, tmp_path: Any) -> Any:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    client = RsiClient(settings, engine=engine, redis=fake_redis, dispatcher=RecordingDispatcher())
    queue: deque[tuple[str, str]] = deque()
    model = ScriptedModel([policy], repeat_last=True, provider="sim", model="sim-1")
    turn_env = TurnEnv(client, RuntimeParams(), model, lambda a, s: queue.append((a, s)))
    rc = RuntimeClient(client, params=turn_env.params, wake=turn_env.wake, actor="operator:ann")
    rc.register("P", {"system_parts": [["lead", LEAD]], "subagents": CATALOG, "tools": ["search"]})
    yield turn_env, queue, rc
    client.close()


def _counts(rc: RuntimeClient) -> tuple[int, ...]:
    with rc.sessions() as s:
        return tuple(s.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
                     for t in (SubagentRow, MessageRow, SpendRow, AgentRuntimeRow))


def test_a_host_spawn_runs_the_child_and_a_retry_returns_the_same_handle(env: Any) -> None:
    turn_env, queue, rc = env
    first = rc.spawn("P", "researcher", "topic x", request_id="req-1")
    assert first["created"] and first["agent"] == "P.researcher" and first["name"] == "researcher-1"
    assert list(queue) == [("P.researcher", first["handle"])]
    before = _counts(rc)
    again = rc.spawn("P", "researcher", "topic x", request_id="req-1")
    assert again["handle"] == first["handle"] and not again["created"]
    assert _counts(rc) == before and len(queue) == 1  # nothing written, nobody woken twice
    drain(turn_env, queue)
    out = rc.wait([first["handle"]], timeout_s=0)
    assert out["pending"] == [] and not out["timed_out"]
    assert [(r["status"], r["answer"]) for r in out["results"]] == [("completed", "finding on topic x")]
    assert rc.tree("P")["spend"]["spawns"] == 1


def test_host_spawn_admission_refuses_and_writes_nothing(env: Any) -> None:
    _, queue, rc = env
    before = _counts(rc)
    with pytest.raises(RuntimeRefusal, match="unknown_spec"):
        rc.spawn("P", "writer", "x")
    with pytest.raises(UnknownAgentError):
        rc.spawn("Q", "researcher", "x")
    with pytest.raises(InvalidInput, match=r"^input: at most 16,384"):
        rc.spawn("P", "researcher", "x" * 16_385)
    with pytest.raises(InvalidInput, match=r"^spec: must match"):
        rc.spawn("P", "Bad Spec", "x")
    with pytest.raises(InvalidInput, match=r"^request_id"):
        rc.spawn("P", "researcher", "x", request_id="a b")
    with pytest.raises(InvalidInput, match=r"^session"):
        rc.spawn("P", "researcher", "x", session="../etc")
    assert _counts(rc) == before and not queue
    rc.set_caps("P", {"tree_spawns_per_day": 1})
    rc.spawn("P", "researcher", "x")
    before = _counts(rc)
    with pytest.raises(RuntimeRefusal, match="cap_exceeded:spawns"):
        rc.spawn("P", "researcher", "x")
    assert _counts(rc) == before and len(queue) == 1


def test_a_wait_ends_when_another_thread_settles_the_handle(env: Any) -> None:
    rc = env[2]
    h = rc.spawn("P", "researcher", "topic y")["handle"]
    out: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: out.update(rc.wait([h], timeout_s=60)))
    waiter.start()
    assert rc.cancel(h, "operator") == [h]
    waiter.join(120)
    assert not waiter.is_alive()
    assert out["pending"] == [] and out["results"][0]["status"] == "cancelled"
    assert rc.client.redis.llen(keys.handle_done(h)) == 1  # the mark stays for other waiters


def test_wait_modes_timeouts_and_hostile_input(env: Any) -> None:
    _, _, rc = env
    a = rc.spawn("P", "researcher", "one", request_id="a")["handle"]
    b = rc.spawn("P", "researcher", "two", request_id="b")["handle"]
    rc.cancel(a)
    assert rc.wait([a, b], timeout_s=0) == {
        "results": [rc.poll(a)], "pending": [b], "timed_out": True}
    assert rc.wait([a, b], timeout_s=30, mode="any")["timed_out"] is False
    for bad, field in (([], "handles"), ("sa_1", "handles"), ([a] * 65, "handles"), ([1], "handles"),
                       (["x y"], "handles")):
        with pytest.raises(InvalidInput, match=rf"^{field}"):
            rc.wait(bad)
    with pytest.raises(InvalidInput, match=r"^mode"):
        rc.wait([a], mode="some")
    for t in (-1, float("nan"), "5", True):
        with pytest.raises(InvalidInput, match=r"^timeout_s"):
            rc.wait([a], timeout_s=t)
    with pytest.raises(RuntimeRefusal, match="unknown_handle"):
        rc.wait([a, "sa_missing"], timeout_s=0)


def test_set_subagent_spec_edits_the_roots_catalog(env: Any) -> None:
    _, _, rc = env
    spec = {"description": "writes", "tools": ["search"], "max_iterations": 3, "instructions": "Write."}
    assert rc.set_subagent_spec("P", "writer", spec)["catalog"] == ["researcher", "writer"]
    h = rc.spawn("P", "writer", "draft")
    assert h["agent"] == "P.writer"
    with rc.sessions() as s:
        child = s.get(AgentRuntimeRow, "P.writer")
        assert child is not None and child.profile["tools"] == ["search"]
        assert s.execute(sa.select(sa.func.count()).select_from(EventRow).where(
            EventRow.kind == "catalog")).scalar_one() == 1
    hostile = [
        ("Writer", spec, r"^name"),
        ("w" * 33, spec, r"^name"),
        ("writer", {**spec, "tools": ["shell"]}, r"^spec\.tools must name tools of the agent's grant"),
        ("writer", {**spec, "max_iterations": 10**9}, r"^spec\.max_iterations"),
        ("writer", {**spec, "instructions": ""}, r"^spec\.instructions"),
        ("writer", {**spec, "extra": 1}, r"^spec: keys are"),
        ("writer", ["not", "an", "object"], r"^spec: must be an object"),
    ]
    for name, bad, match in hostile:
        with pytest.raises(InvalidInput, match=match):
            rc.set_subagent_spec("P", name, bad)
    with pytest.raises(InvalidInput, match=r"^root: the catalog is set on a root"):
        rc.set_subagent_spec("P.writer", "x", spec)
    with pytest.raises(InvalidInput, match=r"^name: spec 'writer' has 1 live handle"):
        rc.set_subagent_spec("P", "writer", None)
    rc.cancel(h["handle"])
    assert rc.set_subagent_spec("P", "writer", None)["catalog"] == ["researcher"]
    with pytest.raises(InvalidInput, match=r"^name: no spec 'writer'"):
        rc.set_subagent_spec("P", "writer", None)
    with pytest.raises(RuntimeRefusal, match="unknown_spec"):
        rc.spawn("P", "writer", "draft 2")
