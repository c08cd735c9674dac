"""Durable family mailboxes (docs/runtime/messages.md).

Messages live in ``rsi_messages``; Redis holds only wake marks and rate buckets. A send resolves
its address, then runs the checks in order, the first failure writing nothing: ``too_large``;
``recipient_not_found``, ``recipient_deleted``, ``not_in_family``; ``hop_limit``; ``mailbox_full``;
``rate_limited``; ``cap_exceeded:messages``. The unique key ``msg:{sender}:{io}:{tool_use_id}:{target}``
makes a retried send return its first receipts.

Delivery: :func:`claim` marks up to ``MSG_PER_TURN`` unconsumed messages of a mailbox (agent ×
session) in ``seq`` order with ``claimed_io`` and ``claimed_until``; only :func:`consume`, inside
the committing transaction, consumes them, and only messages still claimed by that io, so an
expired claim is redelivered (at least once) but at most one committed world consumes a message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rsi_common.config import RuntimeParams
from rsi_common.db.runtime_models import AgentRuntimeRow, MessageRow, SubagentRow
from rsi_common.db.sqltypes import db_now
from rsi_common.runtime import keys
from rsi_common.runtime.caps import Caps, DayTotals, first_exceeded
from rsi_common.runtime.ids import new_id
from rsi_common.runtime.spend import Charge, charge, msg_key, tree_totals
from rsi_common.runtime.subagents import RuntimeRefusal
from rsi_common.runtime.tree import add_event

__all__ = [
    "Mailbox",
    "Sender",
    "claim",
    "consume",
    "hops_of",
    "render",
    "send",
    "take_token",
    "wake_after_commit",
]

_BUCKET = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local size, refill = tonumber(ARGV[1]), tonumber(ARGV[2])
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or ARGV[1])
local ts = tonumber(redis.call('HGET', KEYS[1], 'ts') or now)
tokens = math.min(size, tokens + math.floor((now - ts) / refill))
if tokens < size then ts = ts + math.floor((now - ts) / refill) * refill else ts = now end
if tokens < 1 then
  redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', ts)
  return refill - (now - ts)
end
redis.call('HSET', KEYS[1], 'tokens', tokens - 1, 'ts', ts)
redis.call('PEXPIRE', KEYS[1], size * refill * 2)
return 0
"""


@dataclass(frozen=True)
class Sender:
    """Who sends: an agent's turn (``agent``, ``session``, ``io``, ``tool_use_id`` and the hops of the
    messages that started its logical turn), or an operator/host (``agent`` ``None``)."""

    agent: str | None
    session: str = "main"
    io: str = ""
    tool_use_id: str = ""
    hops_in: int = 0
    actor: str = "operator"


@dataclass(frozen=True)
class Mailbox:
    """A recipient: agent × session, and how it sees the sender."""

    agent: str
    session: str
    relationship: str
    target: str


def take_token(client: Any, agent: str, params: RuntimeParams) -> int:
    """Take one send from the agent's bucket: 0 if allowed, else the milliseconds to wait."""
    script = client.register_script(_BUCKET)
    return int(script(keys=[keys.bucket(agent)], args=[params.msg_bucket, params.msg_refill_ms]))


def _live(session: Session, agent: str) -> AgentRuntimeRow:
    row = session.get(AgentRuntimeRow, agent)
    if row is None:
        raise RuntimeRefusal("recipient_not_found", "no such recipient")
    if row.lifecycle == "deleted":
        raise RuntimeRefusal("recipient_deleted", "the recipient was deleted")
    return row


def _resolve(session: Session, sender: Sender, to: str) -> list[Mailbox]:
    if not isinstance(to, str) or not to or len(to) > 300:
        raise RuntimeRefusal("recipient_not_found", "'to' must be parent, child:<name>, sibling:<name> "
                             "or all")
    if sender.agent is None:
        agent, _, sess = to.partition("@")
        _live(session, agent)
        return [Mailbox(agent, sess or "main", "operator", to)]
    me = session.get(AgentRuntimeRow, sender.agent)
    if me is None:
        raise RuntimeRefusal("not_in_family", "the sender is not registered")
    own = session.get(SubagentRow, sender.session) if me.parent_id is not None else None

    def parent() -> list[Mailbox]:
        if own is None:
            raise RuntimeRefusal("recipient_not_found", "this agent has no parent")
        _live(session, own.parent_agent)
        return [Mailbox(own.parent_agent, own.parent_session, "child", "parent")]

    def child(name: str) -> list[Mailbox]:
        h = session.execute(sa.select(SubagentRow).where(SubagentRow.parent_agent == sender.agent,
                                                         SubagentRow.name == name)).scalar_one_or_none()
        if h is None:
            raise RuntimeRefusal("recipient_not_found", f"no child named {name[:40]!r}")
        _live(session, h.child_agent)
        return [Mailbox(h.child_agent, h.id, "parent", f"child:{name}")]

    def sibling(name: str) -> list[Mailbox]:
        if own is None:
            raise RuntimeRefusal("recipient_not_found", "a root has no siblings")
        h = session.execute(sa.select(SubagentRow).where(SubagentRow.parent_agent == own.parent_agent,
                                                         SubagentRow.name == name)).scalar_one_or_none()
        if h is None or h.id == own.id:
            raise RuntimeRefusal("recipient_not_found", f"no sibling named {name[:40]!r}")
        _live(session, h.child_agent)
        return [Mailbox(h.child_agent, h.id, "sibling", f"sibling:{name}")]

    if to == "parent":
        return parent()
    if to.startswith("child:"):
        return child(to[6:])
    if to.startswith("sibling:"):
        return sibling(to[8:])
    if to == "all":
        out = parent() if own is not None else []
        kids = session.execute(sa.select(SubagentRow.name).where(
            SubagentRow.parent_agent == sender.agent, SubagentRow.parent_session == sender.session)
            .order_by(SubagentRow.created_at, SubagentRow.id)).scalars()
        for name in kids:
            try:
                out += child(name)
            except RuntimeRefusal:
                continue
        if own is not None:
            sibs = session.execute(sa.select(SubagentRow.name).where(
                SubagentRow.parent_agent == own.parent_agent, SubagentRow.id != own.id)
                .order_by(SubagentRow.created_at, SubagentRow.id)).scalars()
            for name in sibs:
                try:
                    out += sibling(name)
                except RuntimeRefusal:
                    continue
        if not out:
            raise RuntimeRefusal("recipient_not_found", "this agent has no family")
        return out
    raise RuntimeRefusal("not_in_family", "agents reach only parent, child:<name>, sibling:<name> or all")


def _key(sender: Sender, target: str) -> str:
    if sender.agent is None:
        return f"op:{sender.io or new_id('op')}:{target}"
    return f"msg:{sender.agent}:{sender.io}:{sender.tool_use_id}:{target}"


def send(session: Session, client: Any, params: RuntimeParams, caps: Caps, sender: Sender, to: str,
         text: str) -> tuple[list[dict[str, Any]], list[Mailbox]]:
    """Send ``text`` to ``to``; inside the caller's transaction.

    Returns:
        ``(receipts, mailboxes to wake after commit)``; a retried send returns its first receipts and
        nothing to wake.

    Raises:
        RuntimeRefusal: the first failed check (nothing stored).
    """
    if not isinstance(text, str) or len(text) > params.msg_max_chars:
        raise RuntimeRefusal("too_large", f"text must be at most {params.msg_max_chars} characters")
    boxes = _resolve(session, sender, to)
    firsts = [session.execute(sa.select(MessageRow).where(MessageRow.key == _key(sender, b.target)))
              .scalar_one_or_none() for b in boxes] if sender.agent is not None or sender.io else []
    if firsts and all(m is not None for m in firsts):
        return [{"id": m.id, "to": b.target} for m, b in zip(firsts, boxes, strict=True) if m is not None], []
    hops = sender.hops_in + 1 if sender.agent is not None else 0
    if hops > params.msg_max_hops:
        raise RuntimeRefusal("hop_limit", f"hop {hops} exceeds {params.msg_max_hops}")
    for b in boxes:
        pending = session.execute(sa.select(sa.func.count()).select_from(MessageRow).where(
            MessageRow.recipient == b.agent, MessageRow.session_id == b.session,
            MessageRow.consumed_io.is_(None))).scalar_one()
        if pending >= params.msg_max_pending:
            raise RuntimeRefusal("mailbox_full", f"{b.target} holds {params.msg_max_pending} unread messages")
    if sender.agent is not None:
        wait_ms = take_token(client, sender.agent, params)
        if wait_ms > 0:
            raise RuntimeRefusal("rate_limited", f"retry after {wait_ms} ms")
    root = session.get(AgentRuntimeRow, boxes[0].agent)
    root_id = root.root_id if root is not None else boxes[0].agent
    day = session.execute(sa.select(db_now())).scalar_one().strftime("%Y-%m-%d")
    dim = first_exceeded(caps, tree_totals(session, root_id, day), DayTotals(messages=len(boxes)))
    if dim is not None:
        add_event(session, sender.agent or boxes[0].agent, "cap", "runtime", dim=dim, action="message")
        raise RuntimeRefusal(f"cap_exceeded:{dim}", "the tree's daily cap is reached")
    receipts = []
    for b in boxes:
        mid = new_id("m")
        session.add(MessageRow(id=mid, key=_key(sender, b.target), kind="message", sender=sender.agent,
                               relationship=b.relationship, recipient=b.agent, session_id=b.session,
                               text=text, hops=hops, root_id=root_id))
        charge(session, Charge(msg_key(mid), "msg", root_id, sender.agent or b.agent, messages=1), day)
        receipts.append({"id": mid, "to": b.target})
    session.flush()
    return receipts, boxes


def wake_after_commit(client: Any, boxes: Sequence[Mailbox]) -> list[Mailbox]:
    """``SET NX`` each mailbox's wake mark; returns the mailboxes whose mark is new (enqueue a turn
    for each: a mark already set means a turn is already on its way)."""
    return [b for b in boxes if client.set(keys.wake(b.agent, b.session), "1", nx=True, ex=keys.WAKE_TTL_S)]


def claim(session: Session, agent: str, session_id: str, io: str, *, limit: int, lease_s: float,
          now: Any = None) -> list[MessageRow]:
    """Claim up to ``limit`` unconsumed messages of the mailbox for ``io`` (those unclaimed, claimed
    by ``io`` already, or whose claim expired), in ``seq`` order, until ``now + lease_s``. ``now``: the
    database clock read earlier in the turn (``None``: read it here)."""
    if now is None:
        now = session.execute(sa.select(db_now())).scalar_one()
    stmt = sa.select(MessageRow).where(
        MessageRow.recipient == agent, MessageRow.session_id == session_id, MessageRow.consumed_io.is_(None),
        sa.or_(MessageRow.claimed_io.is_(None), MessageRow.claimed_io == io, MessageRow.claimed_until < now),
    ).order_by(MessageRow.seq).limit(limit)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True)
    rows = list(session.execute(stmt).scalars())
    for r in rows:
        r.claimed_io = io
        r.claimed_until = now + timedelta(seconds=lease_s)
    session.flush()
    return rows


def consume(session: Session, ids: Sequence[str], io: str) -> int:
    """Consume the messages ``ids`` still claimed by ``io`` and unconsumed; returns how many. The
    committing turn must roll back when this is less than ``len(ids)`` (another io took them)."""
    if not ids:
        return 0
    result: Any = session.execute(sa.update(MessageRow).where(
        MessageRow.id.in_(list(ids)), MessageRow.claimed_io == io, MessageRow.consumed_io.is_(None))
        .values(consumed_io=io))
    return int(result.rowcount)


def render(m: MessageRow) -> str:
    """A message as turn input: spawn inputs and autonomy continuations plain, heartbeats
    ``[heartbeat <label>] <text>``, others ``[message <id> from <sender> (<relationship>)]\\n<text>``."""
    if m.kind in ("spawn_input", "continuation"):
        return m.text
    if m.kind == "heartbeat":
        return f"[heartbeat {m.label or ''}] {m.text}"
    return f"[message {m.id} from {m.sender or 'operator'} ({m.relationship})]\n{m.text}"


def hops_of(messages: Sequence[MessageRow]) -> int:
    """The largest hop count among the messages that start a logical turn (operator, heartbeat and
    spawn messages count 0)."""
    return max((m.hops for m in messages if m.kind == "message" and m.sender is not None), default=0)
