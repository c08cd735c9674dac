"""Spawn admission, settlement and cancel cascade (docs/runtime/subagents.md), on SQLite and fakeredis."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.config import RuntimeParams
from rsi_common.db.runtime_models import AgentRuntimeRow, EventRow, MessageRow, SpendRow, SubagentRow
from rsi_common.errors import InvalidInput
from rsi_common.runtime import Caps, keys
from rsi_common.runtime.subagents import (
    RuntimeRefusal,
    SpawnRequest,
    SpecEntry,
    after_settle,
    cancel,
    delete_agent,
    item,
    poll,
    restore_cancel_flags,
    settle,
    spawn,
)
from rsi_common.runtime.tree import AgentProfile, get_runtime, register

NO_CAPS = Caps(None, None, None, None, None, None)
CATALOG = {"researcher": SpecEntry("finds sources", ("search",), 4),
           "worker": SpecEntry("does one step", (), 2)}
GRANT = ("search", "read")


def _root(factory: sessionmaker[Session], agent: str = "P") -> None:
    with factory.begin() as s:
        register(s, agent, AgentProfile(tools=GRANT))


def _spawn(factory: sessionmaker[Session], *, params: RuntimeParams | None = None, caps: Caps = NO_CAPS,
           catalog: Any = CATALOG, parent: str = "P", session: str = "main", io: str = "main:1",
           tool: str = "tu1", spec: str = "researcher", name: str | None = None) -> tuple[SubagentRow, bool]:
    with factory.begin() as s:
        return spawn(s, params or RuntimeParams(), caps,
                     SpawnRequest(parent, session, io, tool, spec, "find three sources", name),
                     catalog, GRANT)


def _counts(factory: sessionmaker[Session]) -> tuple[int, ...]:
    with factory() as s:
        return tuple(s.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
                     for t in (SubagentRow, MessageRow, SpendRow, AgentRuntimeRow))


def test_three_spawns_pool_into_one_child_agent(factory: sessionmaker[Session]) -> None:
    _root(factory)
    rows = [_spawn(factory, tool=f"tu{i}")[0] for i in range(3)]
    assert [r.name for r in rows] == ["researcher-1", "researcher-2", "researcher-3"]
    assert {r.child_agent for r in rows} == {"P.researcher"}
    assert all(r.id.startswith("sa_") and len(r.id) == 27 and r.status == "queued" for r in rows)
    with factory() as s:
        child = get_runtime(s, "P.researcher")
        assert (child.root_id, child.parent_id, child.depth) == ("P", "P", 1)
        assert child.profile["tools"] == ["search"]
        inputs = list(s.execute(sa.select(MessageRow).order_by(MessageRow.seq)).scalars())
        assert [(m.kind, m.session_id, m.recipient) for m in inputs] == [
            ("spawn_input", r.id, "P.researcher") for r in rows]
        spend = list(s.execute(sa.select(SpendRow.key, SpendRow.spawns, SpendRow.root_id)).all())
        assert sorted(spend) == sorted((f"spawn:{r.id}", 1, "P") for r in rows)


def test_a_retried_spawn_returns_the_first_handle(factory: sessionmaker[Session]) -> None:
    _root(factory)
    first, created = _spawn(factory)
    before = _counts(factory)
    again, created_again = _spawn(factory)
    assert (created, created_again, again.id) == (True, False, first.id)
    assert _counts(factory) == before


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"catalog": None}, "not_enabled"),
    ({"spec": "nope"}, "unknown_spec"),
    ({"catalog": {"researcher": SpecEntry("d", ("admin_console",), 1)}}, "grant_exceeded"),
    ({"params": RuntimeParams(max_depth=0)}, "depth_limit"),
    ({"caps": Caps(None, None, None, None, 0, None)}, "cap_exceeded:spawns"),
])
def test_each_refusal_writes_nothing(factory: sessionmaker[Session], kwargs: dict[str, Any],
                                     code: str) -> None:
    _root(factory)
    before = _counts(factory)
    with pytest.raises(RuntimeRefusal) as info:
        _spawn(factory, **kwargs)
    assert info.value.code == code
    assert _counts(factory) == before


def test_fanout_limits_fire_exactly_at_their_boundary(factory: sessionmaker[Session]) -> None:
    _root(factory)
    params = RuntimeParams(max_spawns_per_turn=3, max_live_children=4)
    for i in range(3):
        _spawn(factory, params=params, tool=f"a{i}")
    with pytest.raises(RuntimeRefusal, match="3 spawns per turn"):
        _spawn(factory, params=params, tool="a3")
    _spawn(factory, params=params, io="main:2", tool="b0")  # 4th live child, next turn
    with pytest.raises(RuntimeRefusal, match="4 live children per session"):
        _spawn(factory, params=params, io="main:2", tool="b1")
    with factory() as s:
        h = s.execute(sa.select(SubagentRow.id).limit(1)).scalar_one()
    with factory.begin() as s:
        assert settle(s, h, "completed", answer="done")
    _spawn(factory, params=params, io="main:2", tool="b1")  # a settled child frees its place


def test_the_first_settlement_wins(factory: sessionmaker[Session]) -> None:
    _root(factory)
    row, _ = _spawn(factory)
    with factory.begin() as s:
        assert settle(s, row.id, "completed", answer="x" * 10_000)
    with factory.begin() as s:
        assert not settle(s, row.id, "failed", error="worker_lost")
        assert not settle(s, row.id, "cancelled")
        got = poll(s, "P", "main", row.id)
        assert (got.status, len(got.answer or ""), got.error) == ("completed", 4000, None)
        assert set(item(got)) == {"handle", "name", "spec", "status", "answer", "error"}
    with factory() as s, pytest.raises(InvalidInput):
        settle(s, row.id, "queued")


def test_a_handle_of_another_session_is_unknown(factory: sessionmaker[Session]) -> None:
    _root(factory)
    row, _ = _spawn(factory)
    with factory() as s:
        for owner, sess, h in (("P", "other", row.id), ("Q", "main", row.id), ("P", "main", "sa_x")):
            with pytest.raises(RuntimeRefusal) as info:
                poll(s, owner, sess, h)
            assert info.value.code == "unknown_handle"


def test_a_cancel_reaches_depth_two_in_one_call(factory: sessionmaker[Session], fake_redis: Any) -> None:
    _root(factory)
    params = RuntimeParams(max_depth=2)
    top, _ = _spawn(factory, params=params)
    with factory.begin() as s:
        s.execute(sa.update(AgentRuntimeRow).where(AgentRuntimeRow.agent_id == "P.researcher").values(
            profile={**AgentProfile(tools=GRANT).to_json()}))
    low, _ = _spawn(factory, params=params, parent="P.researcher", session=top.id, io=f"{top.id}:1",
                    spec="worker")
    assert low.child_agent == "P.researcher.worker"
    with factory.begin() as s:
        assert get_runtime(s, "P.researcher.worker").depth == 2
        done = cancel(s, top.id, "operator")
    assert sorted(done) == sorted([top.id, low.id])
    after_settle(fake_redis, done, cancelled=True, ttl_s=60)
    assert all(fake_redis.get(keys.handle_cancel(h)) == b"1" for h in done)
    assert all(fake_redis.lrange(keys.handle_done(h), 0, -1) == [b"1"] for h in done)
    fake_redis.flushall()
    with factory() as s:
        assert restore_cancel_flags(s, fake_redis, ttl_s=600) == 2
    assert all(fake_redis.get(keys.handle_cancel(h)) == b"1" for h in done)


def test_delete_tombstones_the_subtree_and_cancels_live_handles(factory: sessionmaker[Session]) -> None:
    _root(factory)
    row, _ = _spawn(factory)
    with factory.begin() as s:
        assert delete_agent(s, "P", actor="operator:ann") == [row.id]
    with factory() as s:
        assert get_runtime(s, "P").lifecycle == "deleted"
        assert get_runtime(s, "P.researcher").lifecycle == "deleted"
        kinds = [(e.agent_id, e.kind, e.detail.get("to")) for e in
                 s.execute(sa.select(EventRow).order_by(EventRow.id)).scalars()]
        assert ("P", "lifecycle", "deleted") in kinds and ("P.researcher", "lifecycle", "deleted") in kinds
        assert ("P", "settle", None) in kinds


def test_reserved_ids_and_bad_profiles_are_refused(factory: sessionmaker[Session]) -> None:
    with factory.begin() as s, pytest.raises(InvalidInput, match="reserved"):
        register(s, "sa", AgentProfile())
    with pytest.raises(InvalidInput, match=r"profile\.tools"):
        AgentProfile.from_json({"tools": ["ok", "no spaces"]})
    with pytest.raises(InvalidInput, match="unknown key 'sekret'"):
        AgentProfile.from_json({"sekret": "sk-ant-xxxxxxxx"})
    assert AgentProfile.from_json(AgentProfile(tools=("a",)).to_json()) == AgentProfile(tools=("a",))
