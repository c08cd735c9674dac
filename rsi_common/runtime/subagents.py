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
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from rsi_common.boundary import MAX_ID_CHARS, check_id
from rsi_common.config import RuntimeParams
from rsi_common.db.models import AgentRow
from rsi_common.db.runtime_models import AgentRuntimeRow, EventRow, MessageRow, SpendRow, SubagentRow
from rsi_common.db.sqltypes import db_ago, db_now
from rsi_common.errors import InvalidInput
from rsi_common.runtime import keys
from rsi_common.runtime.budget import Budget
from rsi_common.runtime.caps import Caps, DayTotals, first_exceeded
from rsi_common.runtime.ids import new_id
from rsi_common.runtime.spend import Charge, spawn_key, tree_totals
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
          catalog: Mapping[str, SpecEntry] | None, grant: Sequence[str], *,
          budget: Budget | None = None) -> tuple[SubagentRow, bool]:
    """Admit and record one spawn, or return the handle an earlier identical call created.

    Two statements on PostgreSQL (decision D50): one ``SELECT`` that locks the parent's runtime row and
    reads every admission fact (an earlier identical spawn, the child's row, the turn's and the
    session's counts, the spec's count and the name, the database clock), then one statement that
    inserts the child's agent and runtime rows if missing, the handle, the input message, the spend
    row and the events (data-modifying CTEs). SQLite runs the inserts one by one.

    Args:
        session: the caller's transaction.
        params: runtime settings.
        caps: the tree's caps.
        req: the call.
        catalog: the parent harness's ``subagents.catalog`` specs, ``None`` if not enabled.
        grant: the parent's granted tools.
        budget: the day counters (docs/runtime/accounting.md): the cap check reads the tree's Redis
            counters instead of summing ``rsi_spend``, and the spawn is added to them after the
            caller's commit. ``None`` sums ``rsi_spend``.

    Returns:
        ``(handle, created)``; wake the child after commit when ``created``. A created handle is a
        transient row (its columns set, not attached to ``session``).

    Raises:
        RuntimeRefusal: the first admission check that fails; nothing was written.
        InvalidInput: a malformed request (input too long, bad name).
    """
    facts = _admission_facts(session, req)
    if facts is None:
        get_runtime(session, req.parent)  # raises UnknownAgentError
        raise RuntimeRefusal("not_enabled", "the parent is not registered")  # pragma: no cover
    if facts.existing is not None:
        row = session.get(SubagentRow, facts.existing)
        if row is not None:
            return row, False
    if not isinstance(req.input, str) or len(req.input) > MAX_INPUT_CHARS:
        raise RuntimeRefusal("too_large", f"input must be a string of at most {MAX_INPUT_CHARS} characters")
    if req.name is not None and not SPEC_NAME.match(req.name):
        raise RuntimeRefusal("bad_name", "name must match ^[a-z][a-z0-9-]{0,31}$")
    if catalog is None:
        raise RuntimeRefusal("not_enabled", "the sub-agent catalog is not enabled")
    spec = catalog.get(req.spec)
    if spec is None:
        known = ", ".join(sorted(catalog))
        raise RuntimeRefusal("unknown_spec", f"no spec {req.spec[:40]!r}; known: {known}")
    if not set(spec.tools) <= set(grant):
        raise RuntimeRefusal("grant_exceeded", "the spec names tools outside the parent's grant")
    child_id = _child_id(req.parent, req.spec)
    if facts.depth + 1 > params.max_depth or len(child_id) > MAX_ID_CHARS:
        raise RuntimeRefusal("depth_limit", f"depth {facts.depth + 1} exceeds {params.max_depth}")
    if facts.child_exists and facts.child_parent != req.parent:
        raise RuntimeRefusal("id_taken", "the child's id belongs to another agent")
    if facts.in_turn >= params.max_spawns_per_turn:
        raise RuntimeRefusal("fanout_limit", f"{params.max_spawns_per_turn} spawns per turn")
    if facts.live >= params.max_live_children:
        raise RuntimeRefusal("fanout_limit", f"{params.max_live_children} live children per session")
    day = facts.now.strftime("%Y-%m-%d")
    totals = (budget.totals(facts.root, req.parent, day) if budget is not None
              else tree_totals(session, facts.root, day))
    dim = first_exceeded(caps, totals, DayTotals(spawns=1))
    if dim is not None:
        add_event(session, req.parent, "cap", "runtime", dim=dim, action="spawn")
        raise RuntimeRefusal(f"cap_exceeded:{dim}", "the tree's daily cap is reached")
    name = req.name or f"{req.spec}-{facts.n_spec + 1}"
    if facts.name_taken:
        raise RuntimeRefusal("name_taken", f"a child named {name!r} exists")
    check_id(child_id, "agent_id")
    handle = new_id("sa")
    row = SubagentRow(id=handle, parent_agent=req.parent, parent_session=req.parent_session,
                      parent_io=req.parent_io, tool_use_id=req.tool_use_id, child_agent=child_id, name=name,
                      spec=req.spec, spec_version=req.parent_version, status="queued", attempt=0,
                      answer=None, error=None, settled_at=None)
    pg = session.get_bind().dialect.name == "postgresql"
    stmts = _spawn_inserts(facts, req, spec, grant, child_id, row, day, pg)
    if pg:
        session.execute(sa.select(sa.literal(1)).add_cte(*[st.cte(f"w{i}") for i, st in enumerate(stmts)]))
    else:
        for st in stmts:
            session.execute(st)
    if budget is not None:
        root, parent = facts.root, req.parent
        c = Charge(spawn_key(handle), "spawn", root, parent, spawns=1)
        sa.event.listen(session, "after_commit", lambda _s: budget.settle("", root, day, c, parent),
                        once=True)
    return row, True


@dataclass(frozen=True)
class _Facts:
    root: str
    depth: int
    profile: dict[str, Any]
    existing: str | None
    child_exists: bool
    child_parent: str | None
    child_lifecycle: str | None
    in_turn: int
    live: int
    n_spec: int
    name_taken: bool
    now: Any


def _admission_facts(session: Session, req: SpawnRequest) -> _Facts | None:
    """One ``SELECT`` of everything admission reads, locking the parent's runtime row (PostgreSQL;
    SQLite's ``BEGIN IMMEDIATE`` already serializes writers): spawns of one parent run one at a time."""
    P, C, S = AgentRuntimeRow, aliased(AgentRuntimeRow), aliased(SubagentRow)
    child_id = _child_id(req.parent, req.spec)
    count = sa.func.count

    def scalar(q: Any) -> Any:
        return q.scalar_subquery()

    n_spec = scalar(sa.select(count()).select_from(S).where(S.parent_agent == req.parent, S.spec == req.spec))
    name = (sa.literal(req.name) if req.name is not None
            else sa.literal(f"{req.spec}-") + sa.cast(n_spec + 1, sa.String))
    S2 = aliased(SubagentRow)
    stmt: Any = sa.select(
        P.root_id, P.depth, P.profile,
        scalar(sa.select(S.id).where(S.parent_agent == req.parent, S.parent_io == req.parent_io,
                                     S.tool_use_id == req.tool_use_id).limit(1)),
        scalar(sa.select(count()).select_from(C).where(C.agent_id == child_id)),
        scalar(sa.select(C.parent_id).where(C.agent_id == child_id)),
        scalar(sa.select(C.lifecycle).where(C.agent_id == child_id)),
        scalar(sa.select(count()).select_from(S).where(S.parent_agent == req.parent,
                                                       S.parent_io == req.parent_io)),
        scalar(sa.select(count()).select_from(S).where(S.parent_agent == req.parent,
                                                       S.parent_session == req.parent_session,
                                                       S.status.in_(LIVE))),
        n_spec,
        scalar(sa.select(count()).select_from(S2).where(S2.parent_agent == req.parent, S2.name == name)),
        db_now(),
    ).where(P.agent_id == req.parent)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update(of=P)
    r = session.execute(stmt).one_or_none()
    if r is None:
        return None
    return _Facts(root=r[0], depth=int(r[1]), profile=dict(r[2]), existing=r[3], child_exists=bool(r[4]),
                  child_parent=r[5], child_lifecycle=r[6], in_turn=int(r[7]), live=int(r[8]),
                  n_spec=int(r[9]), name_taken=bool(r[10]), now=r[11])


def _event(agent: str, kind: str, actor: str, **detail: Any) -> Any:
    return sa.insert(EventRow).values(agent_id=agent, kind=kind, actor=actor, detail=detail,
                                      created_at=db_now())


def _spawn_inserts(facts: _Facts, req: SpawnRequest, spec: SpecEntry, grant: Sequence[str], child_id: str,
                   row: SubagentRow, day: str, pg: bool) -> list[Any]:
    """The spawn's writes as Core statements, every column given (they run as CTEs on PostgreSQL)."""
    pg_or_lite: Any = postgresql.insert if pg else sqlite.insert
    handle, out = row.id, []
    if not facts.child_exists:
        profile = dict(facts.profile)
        profile["tools"] = [t for t in spec.tools if t in set(grant)]
        profile["runs_on"] = "cluster"
        out.append(pg_or_lite(AgentRow).values(
            id=child_id, frozen=False, state={}, applied_fence=0, turns=0, created_at=db_now(),
            updated_at=db_now()).on_conflict_do_nothing(index_elements=["id"]))
        out.append(sa.insert(AgentRuntimeRow).values(
            agent_id=child_id, root_id=facts.root, parent_id=req.parent, depth=facts.depth + 1, spec=req.spec,
            profile=profile, lifecycle="admitted", caps=None, created_at=db_now(), updated_at=db_now()))
        out.append(_event(child_id, "lifecycle", "runtime", to="admitted", reason=f"spawned as {handle}"))
    elif facts.child_lifecycle in ("inactive", "idle"):
        out.append(sa.update(AgentRuntimeRow).where(AgentRuntimeRow.agent_id == child_id).values(
            lifecycle="admitted", updated_at=db_now()))
        out.append(_event(child_id, "lifecycle", "runtime", **{
            "from": facts.child_lifecycle, "to": "admitted", "reason": f"spawned as {handle}"}))
    out.append(sa.insert(SubagentRow).values(
        id=handle, parent_agent=row.parent_agent, parent_session=row.parent_session, parent_io=row.parent_io,
        tool_use_id=row.tool_use_id, child_agent=child_id, name=row.name, spec=row.spec,
        spec_version=row.spec_version, status="queued", attempt=0, created_at=db_now()))
    out.append(sa.insert(MessageRow).values(
        id=new_id("m"), key=spawn_key(handle), kind="spawn_input", sender=req.parent, relationship="parent",
        recipient=child_id, session_id=handle, text=req.input, hops=0, root_id=facts.root,
        created_at=db_now()))
    out.append(pg_or_lite(SpendRow).values(
        key=spawn_key(handle), kind="spawn", root_id=facts.root, agent_id=req.parent, day=day, tokens=0,
        usd=0.0, model_calls=0, tool_calls=0, turns=0, spawns=1, messages=0, created_at=db_now())
        .on_conflict_do_nothing(index_elements=["key"]))
    out.append(_event(req.parent, "spawn", req.parent, handle=handle, child=child_id, name=row.name))
    return out


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
    # the guarded update returns the parent for the event (one statement, docs/runtime/turn-cost.md)
    parent = session.execute(sa.update(SubagentRow).where(
        SubagentRow.id == handle, SubagentRow.status.in_(LIVE)).values(
        status=status, answer=None if answer is None else answer[:ANSWER_MAX_CHARS],
        error=None if error is None else error[:300], settled_at=db_now())
        .returning(SubagentRow.parent_agent)).scalar_one_or_none()
    if parent is not None:
        add_event(session, parent, "settle", actor, handle=handle, status=status, error=error)
    return parent is not None


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
