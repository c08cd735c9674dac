"""Family mailboxes (docs/runtime/messages.md): addressing, each limit at its boundary, claims."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.config import RuntimeParams
from rsi_common.db.runtime_models import MessageRow, SpendRow
from rsi_common.db.sqltypes import db_ago
from rsi_common.runtime import Caps
from rsi_common.runtime.messages import Sender, claim, consume, hops_of, render, send, wake_after_commit
from rsi_common.runtime.subagents import RuntimeRefusal, SpawnRequest, SpecEntry, delete_agent, spawn
from rsi_common.runtime.tree import AgentProfile, register

NO_CAPS = Caps(None, None, None, None, None, None)
SLOW = RuntimeParams(msg_refill_ms=3_600_000)  # no refill during a test: the bucket boundary is exact


def _family(factory: sessionmaker[Session]) -> dict[str, str]:
    """P (root) with children researcher-1, researcher-2 (agent P.researcher) and writer-1 (P.writer)."""
    catalog = {"researcher": SpecEntry("r", (), 2), "writer": SpecEntry("w", (), 2)}
    out = {}
    with factory.begin() as s:
        register(s, "P", AgentProfile())
        register(s, "Q", AgentProfile())
        for i, spec in enumerate(("researcher", "researcher", "writer")):
            req = SpawnRequest("P", "main", "main:1", f"t{i}", spec, "go")
            row, _ = spawn(s, RuntimeParams(), NO_CAPS, req, catalog, ())
            out[row.name] = row.id
    return out


def _send(factory: sessionmaker[Session], r: Any, sender: Sender, to: str, text: str = "hi",
          params: RuntimeParams = SLOW, caps: Caps = NO_CAPS) -> list[dict[str, Any]]:
    with factory.begin() as s:
        return send(s, r, params, caps, sender, to, text)[0]


def _child(h: str, agent: str = "P.researcher", **kw: Any) -> Sender:
    return Sender(agent, h, f"{h}:1", kw.pop("tool", "tu"), **kw)


def test_the_family_matrix(factory: sessionmaker[Session], fake_redis: Any) -> None:
    h = _family(factory)
    r1 = _child(h["researcher-1"])
    ok = {"parent": ("P", "main", "child"),
          "sibling:researcher-2": ("P.researcher", h["researcher-2"], "sibling")}
    got = {}
    for i, to in enumerate(["parent", "sibling:researcher-2", "sibling:writer-1"]):
        (receipt,) = _send(factory, fake_redis, _child(h["researcher-1"], tool=f"x{i}"), to)
        with factory() as s:
            m = s.execute(sa.select(MessageRow).where(MessageRow.id == receipt["id"])).scalar_one()
            got[to] = (m.recipient, m.session_id, m.relationship)
    assert got["parent"] == ok["parent"] and got["sibling:researcher-2"] == ok["sibling:researcher-2"]
    assert got["sibling:writer-1"] == ("P.writer", h["writer-1"], "sibling")
    refusals = {
        (r1, "sibling:researcher-1"): "recipient_not_found",  # itself
        (r1, "child:nobody"): "recipient_not_found",
        (r1, "Q"): "not_in_family",
        (Sender("P", "main", "main:1", "tp"), "parent"): "recipient_not_found",
        (Sender("P", "main", "main:1", "tp"), "sibling:writer-1"): "recipient_not_found",
        (Sender("P", "main", "main:1", "tp"), "Q"): "not_in_family",
    }
    for (sender, to), code in refusals.items():
        with pytest.raises(RuntimeRefusal) as info:
            _send(factory, fake_redis, sender, to, params=RuntimeParams())
        assert info.value.code == code, to
    everyone = _send(factory, fake_redis, Sender("P", "main", "main:1", "all"), "all", params=RuntimeParams())
    assert [x["to"] for x in everyone] == ["child:researcher-1", "child:researcher-2", "child:writer-1"]
    op = _send(factory, fake_redis, Sender(None, io="op1"), f"P.writer@{h['writer-1']}")
    with factory() as s:
        m = s.execute(sa.select(MessageRow).where(MessageRow.id == op[0]["id"])).scalar_one()
        assert (m.relationship, m.hops, m.sender) == ("operator", 0, None)


def test_each_limit_at_its_boundary(factory: sessionmaker[Session], fake_redis: Any) -> None:
    h = _family(factory)
    params = RuntimeParams(msg_refill_ms=3_600_000, msg_bucket=100)
    _send(factory, fake_redis, _child(h["researcher-1"], tool="a"), "parent", "x" * 16_384, params=params)
    with pytest.raises(RuntimeRefusal, match="too_large"):
        _send(factory, fake_redis, _child(h["researcher-1"], tool="b"), "parent", "x" * 16_385, params=params)
    _send(factory, fake_redis, _child(h["researcher-1"], tool="c", hops_in=7), "parent", params=params)
    with pytest.raises(RuntimeRefusal, match="hop_limit: hop 9"):
        _send(factory, fake_redis, _child(h["researcher-1"], tool="d", hops_in=8), "parent", params=params)
    for i in range(18):  # 20 pending in P's main mailbox
        _send(factory, fake_redis, _child(h["researcher-2"], tool=f"p{i}"), "parent", params=params)
    with pytest.raises(RuntimeRefusal, match="mailbox_full"):
        _send(factory, fake_redis, _child(h["researcher-2"], tool="p21"), "parent", params=params)
    for i in range(3):
        _send(factory, fake_redis, Sender("P.writer", h["writer-1"], "w:1", f"r{i}"), "sibling:researcher-2")
    with pytest.raises(RuntimeRefusal, match=r"rate_limited: retry after \d+ ms"):
        _send(factory, fake_redis, Sender("P.writer", h["writer-1"], "w:1", "r4"), "sibling:researcher-2")
    with factory() as s:
        sent = s.execute(sa.select(sa.func.count()).select_from(MessageRow).where(
            MessageRow.kind == "message")).scalar_one()
        charged = s.execute(sa.select(sa.func.sum(SpendRow.messages))).scalar_one()
    assert sent == charged == 1 + 1 + 18 + 3


def test_the_message_cap_refuses_and_a_retry_returns_the_first_receipt(
        factory: sessionmaker[Session], fake_redis: Any) -> None:
    h = _family(factory)
    first = _send(factory, fake_redis, _child(h["researcher-1"]), "parent")
    assert _send(factory, fake_redis, _child(h["researcher-1"]), "parent") == first
    with pytest.raises(RuntimeRefusal, match="cap_exceeded:messages"):
        _send(factory, fake_redis, _child(h["researcher-1"], tool="n"), "parent",
              caps=Caps(None, None, None, None, None, 1))


def test_a_deleted_recipient_is_refused(factory: sessionmaker[Session], fake_redis: Any) -> None:
    h = _family(factory)
    with factory.begin() as s:
        delete_agent(s, "P.writer", actor="operator")
    with pytest.raises(RuntimeRefusal, match="recipient_deleted"):
        _send(factory, fake_redis, _child(h["researcher-1"]), "sibling:writer-1")


def test_only_a_commit_consumes_and_an_expired_claim_is_redelivered(
        factory: sessionmaker[Session], fake_redis: Any) -> None:
    h = _family(factory)
    for i in range(3):
        _send(factory, fake_redis, _child(h["researcher-1"], tool=f"c{i}"), "parent", f"m{i}")
    with factory.begin() as s:
        first = [m.id for m in claim(s, "P", "main", "main:2", limit=2, lease_s=180)]
    with factory.begin() as s:
        assert [m.text for m in claim(s, "P", "main", "main:3", limit=8, lease_s=180)] == ["m2"]
        s.execute(sa.update(MessageRow).where(MessageRow.id.in_(first)).values(claimed_until=db_ago(1)))
    with factory.begin() as s:  # main:2's worker was killed: its claim expired
        again = claim(s, "P", "main", "main:4", limit=8, lease_s=180)
        assert [m.id for m in again] == first
    with factory.begin() as s:
        assert consume(s, first, "main:2") == 0  # the dead turn's late commit consumes nothing
        assert consume(s, first, "main:4") == 2
        assert consume(s, first, "main:4") == 0
    with factory.begin() as s:
        assert [m.text for m in claim(s, "P", "main", "main:5", limit=8, lease_s=0)] == []


def test_rendering_hops_and_wake_marks(factory: sessionmaker[Session], fake_redis: Any) -> None:
    h = _family(factory)
    _send(factory, fake_redis, _child(h["researcher-1"], hops_in=2), "parent", "ping")
    with factory.begin() as s:
        msgs = claim(s, "P", "main", "main:2", limit=8, lease_s=60)
        spawn_in = claim(s, "P.researcher", h["researcher-1"], "x:1", limit=8, lease_s=60)
        assert render(msgs[0]) == f"[message {msgs[0].id} from P.researcher (child)]\nping"
        assert [render(m) for m in spawn_in] == ["go"]
        assert hops_of(msgs) == 3 and hops_of(spawn_in) == 0
    from rsi_common.runtime.messages import Mailbox

    box = Mailbox("P", "main", "child", "parent")
    assert wake_after_commit(fake_redis, [box]) == [box]
    assert wake_after_commit(fake_redis, [box]) == []
