"""Sub-agent handles: spawn admission, settlement, polling, cancel cascade (docs/runtime/subagents.md).

Every function runs inside the caller's transaction and never commits; the ``after_*`` functions
run after the commit and touch only Redis. A spawn's admission checks run in order and the first
failure writes nothing: ``not_enabled``, ``unknown_spec`` (and ``grant_exceeded``), ``depth_limit``
(and ``id_taken``), ``fanout_limit``, ``cap_exceeded:<dim>``. Then one transaction inserts the handle,
the child's runtime row if missing, the ``spawn_input`` message and the spend row ``spawn:{h}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rsi_common.boundary import MAX_ID_CHARS
from rsi_common.config import RuntimeParams
from rsi_common.db.agents import ensure_agent, lock_agent
from rsi_common.db.runtime_models import AgentRuntimeRow, MessageRow, SubagentRow
from rsi_common.db.sqltypes import db_ago, db_now
from rsi_common.errors import InvalidInput
from rsi_common.runtime import keys
from rsi_common.runtime.caps import Caps, DayTotals, first_exceeded
from rsi_common.runtime.ids import new_id
from rsi_common.runtime.spend import Charge, charge, spawn_key, tree_totals
from rsi_common.runtime.tree import SPEC_NAME, add_event, descendants, get_runtime, set_lifecycle

__all__ = [
    "LIVE",
    "SETTLED",
    "SPEC_NAME",
    "RuntimeRefusal",
    "SpawnRequest",
    "SpecEntry",
    "after_settle",
    "cancel",
    "delete_agent",
    "item",
    "poll",
    "restore_cancel_flags",
    "settle",
    "spawn",
]

LIVE: tuple[str, ...] = ("queued", "running", "awaiting")
SETTLED: tuple[str, ...] = ("completed", "failed", "cancelled")
MAX_INPUT_CHARS = 16_384
ANSWER_MAX_CHARS = 4_000
"""A handle's ``answer`` is the child's final text clipped to this many characters."""


class RuntimeRefusal(InvalidInput):
    """A runtime tool refused: ``code`` is the tool error's ``error`` (``{"error": code, "detail"}``)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class SpecEntry:
    """One entry of the catalog's ``specs``."""

    description: str
    tools: tuple[str, ...]
    max_iterations: int


@dataclass(frozen=True)
class SpawnRequest:
    """``subagent_spawn`` from the turn ``parent_io`` (the logical turn's io, slice suffix removed)."""

    parent: str
    parent_session: str
    parent_io: str
    tool_use_id: str
    spec: str
    input: str
    name: str | None = None
    parent_version: str | None = None


def _child_id(parent: str, spec: str) -> str:
    return f"{parent}.{spec}"  # docs/runtime/README.md#decisions D1


def item(row: SubagentRow) -> dict[str, Any]:
    """The tool result of a handle: ``{handle, name, spec, status, answer, error}``."""
    return {"handle": row.id, "name": row.name, "spec": row.spec, "status": row.status,
            "answer": row.answer, "error": row.error}


def spawn(session: Session, params: RuntimeParams, caps: Caps, req: SpawnRequest,
          catalog: Mapping[str, SpecEntry] | None, grant: Sequence[str]) -> tuple[SubagentRow, bool]:
    """Admit and record one spawn, or return the handle an earlier identical call created.

    Args:
        session: the caller's transaction.
        params: runtime settings.
        caps: the tree's caps.
        req: the call.
        catalog: the parent harness's ``subagents.catalog`` specs, ``None`` if not enabled.
        grant: the parent's granted tools.

    Returns:
        ``(handle, created)``; wake the child after commit when ``created``.

    Raises:
        RuntimeRefusal: the first admission check that fails; nothing was written.
        InvalidInput: a malformed request (input too long, bad name).
    """
    existing = session.execute(sa.select(SubagentRow).where(
        SubagentRow.parent_agent == req.parent, SubagentRow.parent_io == req.parent_io,
        SubagentRow.tool_use_id == req.tool_use_id)).scalar_one_or_none()
    if existing is not None:
        return existing, False
    if not isinstance(req.input, str) or len(req.input) > MAX_INPUT_CHARS:
        raise RuntimeRefusal("too_large", f"input must be a string of at most {MAX_INPUT_CHARS} characters")
    if req.name is not None and not SPEC_NAME.match(req.name):
        raise RuntimeRefusal("bad_name", "name must match ^[a-z][a-z0-9-]{0,31}$")
    lock_agent(session, req.parent)
    parent = get_runtime(session, req.parent)
    if catalog is None:
        raise RuntimeRefusal("not_enabled", "the sub-agent catalog is not enabled")
    spec = catalog.get(req.spec)
    if spec is None:
        known = ", ".join(sorted(catalog))
        raise RuntimeRefusal("unknown_spec", f"no spec {req.spec[:40]!r}; known: {known}")
    if not set(spec.tools) <= set(grant):
        raise RuntimeRefusal("grant_exceeded", "the spec names tools outside the parent's grant")
    child_id = _child_id(req.parent, req.spec)
    if parent.depth + 1 > params.max_depth or len(child_id) > MAX_ID_CHARS:
        raise RuntimeRefusal("depth_limit", f"depth {parent.depth + 1} exceeds {params.max_depth}")
    child = session.execute(sa.select(AgentRuntimeRow).where(AgentRuntimeRow.agent_id == child_id)
                            ).scalar_one_or_none()
    if child is not None and child.parent_id != req.parent:
        raise RuntimeRefusal("id_taken", "the child's id belongs to another agent")
    in_turn = session.execute(sa.select(sa.func.count()).select_from(SubagentRow).where(
        SubagentRow.parent_agent == req.parent, SubagentRow.parent_io == req.parent_io)).scalar_one()
    if in_turn >= params.max_spawns_per_turn:
        raise RuntimeRefusal("fanout_limit", f"{params.max_spawns_per_turn} spawns per turn")
    live = session.execute(sa.select(sa.func.count()).select_from(SubagentRow).where(
        SubagentRow.parent_agent == req.parent, SubagentRow.parent_session == req.parent_session,
        SubagentRow.status.in_(LIVE))).scalar_one()
    if live >= params.max_live_children:
        raise RuntimeRefusal("fanout_limit", f"{params.max_live_children} live children per session")
    day = session.execute(sa.select(db_now())).scalar_one().strftime("%Y-%m-%d")
    dim = first_exceeded(caps, tree_totals(session, parent.root_id, day), DayTotals(spawns=1))
    if dim is not None:
        add_event(session, req.parent, "cap", "runtime", dim=dim, action="spawn")
        raise RuntimeRefusal(f"cap_exceeded:{dim}", "the tree's daily cap is reached")
    n = session.execute(sa.select(sa.func.count()).select_from(SubagentRow).where(
        SubagentRow.parent_agent == req.parent, SubagentRow.spec == req.spec)).scalar_one()
    name = req.name or f"{req.spec}-{n + 1}"
    if session.execute(sa.select(SubagentRow.id).where(SubagentRow.parent_agent == req.parent,
                                                       SubagentRow.name == name)).first() is not None:
        raise RuntimeRefusal("name_taken", f"a child named {name!r} exists")
    handle = new_id("sa")
    if child is None:
        ensure_agent(session, child_id)
        profile = dict(parent.profile)
        profile["tools"] = [t for t in spec.tools if t in set(grant)]
        profile["runs_on"] = "cluster"
        child = AgentRuntimeRow(agent_id=child_id, root_id=parent.root_id, parent_id=req.parent,
                                depth=parent.depth + 1, spec=req.spec, profile=profile, lifecycle="admitted")
        session.add(child)
        add_event(session, child_id, "lifecycle", "runtime", to="admitted", reason=f"spawned as {handle}")
    elif child.lifecycle in ("inactive", "idle"):
        set_lifecycle(session, child, "admitted", "runtime", f"spawned as {handle}")
    row = SubagentRow(id=handle, parent_agent=req.parent, parent_session=req.parent_session,
                      parent_io=req.parent_io, tool_use_id=req.tool_use_id, child_agent=child_id, name=name,
                      spec=req.spec, spec_version=req.parent_version, status="queued", attempt=0)
    session.add(row)
    session.add(MessageRow(id=new_id("m"), key=spawn_key(handle), kind="spawn_input", sender=req.parent,
                           relationship="parent", recipient=child_id, session_id=handle, text=req.input,
                           hops=0, root_id=parent.root_id))
    charge(session, Charge(spawn_key(handle), "spawn", parent.root_id, req.parent, spawns=1), day)
    add_event(session, req.parent, "spawn", req.parent, handle=handle, child=child_id, name=name)
    session.flush()
    return row, True


def poll(session: Session, owner: str, owner_session: str, handle: str) -> SubagentRow:
    """The handle, if ``owner``'s ``owner_session`` spawned it.

    Raises:
        RuntimeRefusal: ``unknown_handle`` (also for a handle of another session: ownership).
    """
    row = session.get(SubagentRow, handle) if isinstance(handle, str) else None
    if row is None or row.parent_agent != owner or row.parent_session != owner_session:
        raise RuntimeRefusal("unknown_handle", "no such handle in this session")
    return row


def settle(session: Session, handle: str, status: str, *, answer: str | None = None,
           error: str | None = None, actor: str = "runtime") -> bool:
    """Settle a live handle; the first settlement wins.

    ``UPDATE … WHERE id = :h AND status IN ('queued','running','awaiting')``: a second settlement
    (a redelivered commit, a cancel racing a completion) changes nothing and returns ``False``.
    """
    if status not in SETTLED:
        raise InvalidInput(f"status must be one of {', '.join(SETTLED)}")
    result: Any = session.execute(sa.update(SubagentRow).where(
        SubagentRow.id == handle, SubagentRow.status.in_(LIVE)).values(
        status=status, answer=None if answer is None else answer[:ANSWER_MAX_CHARS],
        error=None if error is None else error[:300], settled_at=db_now()))
    won = bool(result.rowcount)
    if won:
        parent = session.execute(
            sa.select(SubagentRow.parent_agent).where(SubagentRow.id == handle)).scalar_one()
        add_event(session, parent, "settle", actor, handle=handle, status=status, error=error)
    return won


def cancel(session: Session, handle: str, reason: str, *, actor: str = "runtime") -> list[str]:
    """Cancel ``handle`` and every live handle below it, in one call (R10: a cancel reaches every
    depth). Returns the handles this call settled as ``cancelled``; set their Redis flags after commit
    (:func:`after_settle`)."""
    out: list[str] = []
    frontier = [handle]
    while frontier:
        h = frontier.pop()
        row = session.get(SubagentRow, h)
        if row is None:
            continue
        if settle(session, h, "cancelled", error=f"cancelled:{reason}"[:300], actor=actor):
            out.append(h)
        frontier += list(session.execute(sa.select(SubagentRow.id).where(
            SubagentRow.parent_agent == row.child_agent, SubagentRow.parent_session == h,
            SubagentRow.status.in_(LIVE))).scalars())
    return out


def delete_agent(session: Session, agent_id: str, *, actor: str) -> list[str]:
    """Tombstone ``agent_id`` and its descendants and cancel every live handle of the tree below it
    (R4 ``deleted``). Returns the cancelled handles."""
    rows = [get_runtime(session, agent_id), *descendants(session, agent_id)]
    cancelled: list[str] = []
    for r in rows:
        for h in session.execute(sa.select(SubagentRow.id).where(
                sa.or_(SubagentRow.parent_agent == r.agent_id, SubagentRow.child_agent == r.agent_id),
                SubagentRow.status.in_(LIVE))).scalars():
            cancelled += cancel(session, h, "deleted", actor=actor)
        set_lifecycle(session, r, "deleted", actor, "deleted" if r.agent_id == agent_id else "parent deleted")
    return cancelled


def after_settle(client: Any, handles: Sequence[str], *, cancelled: bool, ttl_s: int) -> None:
    """After the settling commit: push each handle's done mark (waiters BLPOP it) and, for a cancel,
    set its cancel flag (a running child stops before its next call)."""
    pipe = client.pipeline(transaction=False)
    for h in handles:
        pipe.lpush(keys.handle_done(h), "1")
        pipe.expire(keys.handle_done(h), ttl_s)
        if cancelled:
            pipe.set(keys.handle_cancel(h), "1", ex=ttl_s)
    pipe.execute()


def restore_cancel_flags(session: Session, client: Any, *, ttl_s: int) -> int:
    """After a Redis flush: set the cancel flag of every handle cancelled within ``ttl_s`` whose
    child may still be running (R10). Returns how many flags were set."""
    rows = list(session.execute(sa.select(SubagentRow.id).where(
        SubagentRow.status == "cancelled", SubagentRow.settled_at >= db_ago(ttl_s))).scalars())
    if rows:
        pipe = client.pipeline(transaction=False)
        for h in rows:
            pipe.set(keys.handle_cancel(h), "1", ex=ttl_s)
        pipe.execute()
    return len(rows)
