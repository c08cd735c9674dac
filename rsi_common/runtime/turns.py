"""One turn slice of a registered agent's session (docs/runtime/README.md#turns).


:func:`run_session_turn` is the body of the ``rsi.agent_turn(agent, session)`` task and of the
inline driver (:func:`drain`); it never imports Celery. In order:

1. take the lease ``rsi:{a}:turn:{s}`` (held → return ``busy``);
2. name the io: ``{session}:{n}`` for a new logical turn, ``{session}:{n}+{k}`` for slice k of a
   waiting one (decision D14), which runs only once one of its waits is met, its deadline
   passed, or it reached ``MAX_SLICES``;
3. take a tree slot, or queue on ``rsi:tree:{r}:waiting`` and return ``queued``;
4. reserve budget (docs/runtime/accounting.md#reservation; refused → ``capped``);
5. build the input from the resume blocks or the claimed messages (none → ``empty``);
6. run K0 with ``max_turn_tokens = grant`` and ``cancelled()`` = the handle's cancel flag;
7. commit: the world (``RsiClient.record_turn``, idempotent on io), then one transaction
   optimistic on ``rsi_sessions.version``: session, consumption, spend, settlement, lifecycle;
8. release the slot (waking the next waiting session), settle the reservation, notify waiters and
   wake children, recipients, and the session itself if messages remain.

Exactly once: a second attempt of the same io finds the world stored and commits from it without
calling the model (decision D13); the optimistic session update and the guarded settlement make its
commit a no-op when the first attempt's commit already happened.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from rsi_common import db
from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams
from rsi_common.db.runtime_models import AgentRuntimeRow, AutonomyRow, MessageRow, SessionRow, SubagentRow
from rsi_common.db.sqltypes import db_now
from rsi_common.kernel.turn import run_turn
from rsi_common.kernel.types import TurnPlan, TurnResult
from rsi_common.llm import ModelClient
from rsi_common.runtime import attempts, effects, keys
from rsi_common.runtime.autonomy import after_logical_turn, loop_running, running_loop, stop_on_cap, want_of
from rsi_common.runtime.budget import Budget
from rsi_common.runtime.caps import Caps, resolve_caps
from rsi_common.runtime.goals import GoalRow, active_goal, commit_goal, goal_notes_of, goal_remainder_of
from rsi_common.runtime.messages import claim, consume, hops_of, render, wake_after_commit
from rsi_common.runtime.prices import Price, price_of, usd_of
from rsi_common.runtime.refine_tool import start_refines
from rsi_common.runtime.spend import Charge, charge, turn_key
from rsi_common.runtime.subagents import SpecEntry, after_settle, settle
from rsi_common.runtime.tools import ToolContext, runtime_tools, wait_result
from rsi_common.runtime.tree import add_event, get_runtime, set_lifecycle
from rsi_common.world import finalize_world

__all__ = ["TurnEnv", "TurnOutcome", "drain", "marked_wake", "profile_tools", "run_session_turn"]

_SLOT = """
local now = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[4]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  return 1
end
if not redis.call('LPOS', KEYS[2], ARGV[1]) then redis.call('RPUSH', KEYS[2], ARGV[1]) end
return 0
"""
_RELEASE = """
redis.call('ZREM', KEYS[1], ARGV[1])
return redis.call('LPOP', KEYS[2])
"""


@dataclass
class TurnEnv:
    """What every turn of a process shares.

    Attributes:
        client: the recording client (worlds, trajectories, harnesses, consolidation hand-off).
        params: runtime settings.
        model: the policy model client (children use the parent's model).
        wake: enqueue a turn of ``(agent, session)`` (the task on queue ``agents``, or the inline queue).
    """

    client: RsiClient
    params: RuntimeParams
    model: ModelClient
    wake: Callable[[str, str], None]
    models: Callable[[str, str], ModelClient] | None = None
    """Policy client of ``(provider, model)``; ``None`` = :attr:`model` for every agent."""

    def __post_init__(self) -> None:
        self.budget = Budget(self.client.redis, self.client._sessions)
        self._slot = self.client.redis.register_script(_SLOT)
        self._release = self.client.redis.register_script(_RELEASE)

    @property
    def factory(self) -> Any:
        return self.client._sessions


@dataclass(frozen=True)
class TurnOutcome:
    """What one call did: ``ran`` (``status`` is the turn's), or why it did not run (``busy``,
    ``queued``, ``waiting``, ``empty``, ``capped``, ``cancelled``, ``deleted``, ``conflict``), or
    ``failed``: the io failed without running (``answer`` = ``worker_lost`` or ``UNCERTAIN_SIDE_EFFECT``,
    docs/runtime/failures.md), or the agent is ``failed``."""

    outcome: str
    io: str = ""
    status: str = ""
    answer: str = ""


def _now_ms(redis: Any) -> int:
    sec, usec = redis.time()
    return int(sec) * 1000 + int(usec) // 1000


def _spec(rt: AgentRuntimeRow, root: AgentRuntimeRow
          ) -> tuple[dict[str, Any] | None, dict[str, SpecEntry] | None]:
    """The agent's own spec entry (children) and the catalog it may spawn from (the root's)."""
    raw = root.profile.get("subagents") or {}
    catalog = {k: SpecEntry(v["description"], tuple(v["tools"]), int(v["max_iterations"]))
               for k, v in raw.items()}
    return (raw.get(rt.spec) if rt.spec else None), (catalog or None)


def _wait_met(env: TurnEnv, agent: str, session: SessionRow, now: Any) -> bool:
    pending = session.pending or {}
    if session.slice >= env.params.max_slices or (session.wait_deadline and now >= session.wait_deadline):
        return True
    for wait in pending.get("waits", {}).values():
        _, done_all, done_any = wait_result(env.factory, agent, session.session, wait["handles"])
        if not (done_all or (wait["mode"] == "any" and done_any)):
            return False
    return True


def _resume_input(env: TurnEnv, agent: str, session: SessionRow) -> list[dict[str, Any]]:
    """One user message holding every pending ``tool_result`` block, in call order; a wait's block has
    the shape of an immediate return."""
    pending = session.pending or {}
    blocks = []
    for tid in pending["calls"]:
        if tid in pending["results"]:
            blocks.append(pending["results"][tid])
            continue
        out, _, _ = wait_result(env.factory, agent, session.session, pending["waits"][tid]["handles"])
        blocks.append({"type": "tool_result", "tool_use_id": tid,
                       "content": json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
                       "is_error": False})
    return blocks


def run_session_turn(env: TurnEnv, agent: str, session: str) -> TurnOutcome:
    """Run one slice of ``agent``'s ``session`` if there is work (module docstring)."""
    redis = env.client.redis
    lease, token = keys.turn_lease(agent, session), secrets.token_hex(8)
    if not redis.set(lease, token, nx=True, px=env.params.turn_lease_s * 1000):
        return TurnOutcome("busy")
    redis.delete(keys.wake(agent, session))  # a wake from now on enqueues another turn
    try:
        return _locked_turn(env, agent, session, token)
    finally:
        if redis.get(lease) in (token, token.encode()):
            redis.delete(lease)
        if redis.delete(keys.wake(agent, session)):  # a wake found this turn busy: run again
            env.wake(agent, session)


@dataclass
class _Slice:
    """The slice being run: who, which io, and what was reserved for it."""

    rt: AgentRuntimeRow
    row: SessionRow
    handle: SubagentRow | None
    n: int
    k: int
    caps: Caps
    facts: _Facts
    price: Price | None = None
    day: str = ""
    grant: int = 0

    @property
    def agent(self) -> str:
        return self.rt.agent_id

    @property
    def session(self) -> str:
        return self.row.session

    @property
    def logical(self) -> str:
        return f"{self.session}:{self.n}"

    @property
    def io(self) -> str:  # D14: "~" is outside the id grammar, so slice k is "+k"
        return self.logical if self.k == 1 else f"{self.logical}+{self.k}"

    @property
    def res_id(self) -> str:
        return f"{self.agent}:{self.io}"


@dataclass(frozen=True)
class _Facts:
    """What a turn reads once, in the transaction that loads it (docs/runtime/turn-cost.md): the
    root's row (caps, catalog), the database clock, the active goal and the running loop."""

    root: AgentRuntimeRow
    now: Any
    goal: GoalRow | None
    loop: AutonomyRow | None

    @property
    def day(self) -> str:
        """The UTC day of :attr:`now` (``YYYY-MM-DD``, as :func:`~rsi_common.runtime.spend.db_day`)."""
        return str(self.now.strftime("%Y-%m-%d"))


_Loaded = tuple[AgentRuntimeRow, SessionRow, "SubagentRow | None", _Facts]


def _load(env: TurnEnv, agent: str, session: str) -> _Loaded:
    with env.factory.begin() as s:
        rt = get_runtime(s, agent)
        row = s.execute(sa.select(SessionRow).where(SessionRow.agent_id == agent,
                                                    SessionRow.session == session)).scalar_one_or_none()
        if row is None:
            row = SessionRow(agent_id=agent, session=session, messages=[], turns=0, slice=0, version=0)
            s.add(row)
            s.flush()
        handle = s.get(SubagentRow, session) if session.startswith("sa_") else None
        now = s.execute(sa.select(db_now())).scalar_one()
        root = rt if rt.root_id == agent else get_runtime(s, rt.root_id)
        facts = _Facts(root, now, active_goal(s, agent), running_loop(s, agent))
        if rt.lifecycle == "inactive":  # woken: rebuilt from SQL (docs/runtime/README.md#lifecycle)
            set_lifecycle(s, rt, "admitted", "runtime", f"woken in {session}")
        s.flush()
        s.expunge_all()
    return rt, row, handle, facts


def _locked_turn(env: TurnEnv, agent: str, session: str, token: str = "") -> TurnOutcome:
    redis, params = env.client.redis, env.params
    rt, row, handle, facts = _load(env, agent, session)
    if rt.lifecycle == "deleted":
        return TurnOutcome("deleted")
    if rt.lifecycle == "failed":  # until restore (docs/runtime/failures.md)
        attempts.refuse_failed(env, agent, session)
        return TurnOutcome("failed")
    if handle is not None and handle.status == "cancelled":
        return TurnOutcome("cancelled")
    resume = row.pending is not None
    if resume and not _wait_met(env, agent, row, facts.now):
        return TurnOutcome("waiting")
    sl = _Slice(rt, row, handle, *((row.turns, row.slice + 1) if resume else (row.turns + 1, 1)),
                caps=resolve_caps(params, facts.root.caps), facts=facts)
    member = f"{agent}|{session}"
    slot_keys = [keys.tree_slots(rt.root_id), keys.tree_waiting(rt.root_id)]
    if not env._slot(keys=slot_keys, args=[member, _now_ms(redis), params.turn_lease_s * 1000,
                                           params.max_running_per_tree]):
        return TurnOutcome("queued", sl.io)
    begun: attempts.Begun | None = None
    try:  # an attempt: recorded, its lease renewed, recovered by the tick if it crashes
        verdict = attempts.begin(env, agent, session, sl.io, res_id=sl.res_id, root=rt.root_id, token=token)
        if not isinstance(verdict, attempts.Begun):
            attempts.fail_io(env, agent, session, sl.io, verdict[0])
            out = TurnOutcome("failed", sl.io, "failed", verdict[0])
        else:
            begun = verdict
            with effects.entered(effects.Attempt(redis, agent, sl.io, str(rt.profile.get("toolset", "sim")))):
                out = _slotted_turn(env, sl, resume)
        attempts.end(env, agent, session, sl.io, begun)
        return out
    except BaseException:
        attempts.stop_renewing(env, agent, session, begun, sl.grant)
        raise
    finally:
        nxt = env._release(keys=slot_keys, args=[member])
        if nxt:
            a, _, sess = (nxt.decode() if isinstance(nxt, bytes) else str(nxt)).rpartition("|")
            env.wake(a, sess)


def _slotted_turn(env: TurnEnv, sl: _Slice, resume: bool) -> TurnOutcome:
    redis, params, profile = env.client.redis, env.params, sl.rt.profile
    sl.day = sl.facts.day
    sl.price = price_of(params.prices, profile["provider"], profile["model"])
    want = want_of(params.turn_reserve_tokens, goal_remainder_of(sl.facts.goal), sl.facts.loop)
    grant = env.budget.reserve(res_id=sl.res_id, root=sl.rt.root_id, agent=sl.agent, day=sl.day, want=want,
                               caps=sl.caps, price=sl.price,
                               ttl_s=params.turn_lease_s * params.max_turn_attempts)
    if grant.refused:
        code = "cap_unpriced" if grant.dim == "unpriced" else f"cap_exceeded:{grant.dim}"
        handle = sl.handle
        with env.factory.begin() as s:
            add_event(s, sl.agent, "cap", "runtime", dim=grant.dim, action="turn", io=sl.io)
            stop_on_cap(s, sl.agent, grant.dim)
            won = handle is not None and sl.n == 1 and settle(s, handle.id, "failed", error=code)
        if won and handle is not None:
            after_settle(redis, [handle.id], cancelled=False, ttl_s=params.child_timeout_s)
            env.wake(handle.parent_agent, handle.parent_session)
        return TurnOutcome("capped", sl.io, "blocked", code)
    sl.grant = grant.tokens
    try:
        return _granted_turn(env, sl, resume)
    except BaseException:
        env.budget.release(sl.res_id, sl.rt.root_id)
        raise


def _granted_turn(env: TurnEnv, sl: _Slice, resume: bool) -> TurnOutcome:
    redis, params, rt = env.client.redis, env.params, sl.rt
    pending = sl.row.pending or {}
    msg_ids: list[str] = []
    if resume:
        turn_input: Any = _resume_input(env, sl.agent, sl.row)
        hops_in = int(pending.get("hops_in", 0))
        request = pending.get("request")
        with env.factory.begin() as s:  # the turn runs: it holds the lease and has input
            _running(s, sl)
    else:
        with env.factory.begin() as s:  # the claim and the move to running: one transaction
            claimed = claim(s, sl.agent, sl.session, sl.io, limit=params.msg_per_turn,
                            lease_s=3 * params.turn_lease_s, now=sl.facts.now)
            texts, msg_ids, hops_in = [render(m) for m in claimed], [m.id for m in claimed], hops_of(claimed)
            if claimed:
                _running(s, sl)
        if not claimed:
            env.budget.release(sl.res_id, rt.root_id)
            return TurnOutcome("empty", sl.io)
        turn_input = "\n\n".join(texts)
        request = None
    own_spec, catalog = _spec(rt, sl.facts.root)
    ctx = ToolContext(env.factory, redis, params, sl.caps, sl.agent, sl.session, sl.logical, rt.depth,
                      catalog, tuple(profile_tools(rt)), hops_in, None,
                      bool(rt.profile.get("messages", True)))
    ctx.budget_left = lambda: _budget_left(env, sl)
    ctx.check_factory = env.client.settings.check_factory
    ctx.refine = bool(rt.profile.get("refine", False))
    ctx.goal_read, ctx.goal_id = True, None if sl.facts.goal is None else sl.facts.goal.id
    result = _stored_or_run(env, sl, turn_input, ctx, own_spec)
    if result.world is not None:
        world = finalize_world({**result.world, "runtime": {
            "root": rt.root_id, "parent": rt.parent_id, "depth": rt.depth, "session": sl.session,
            "handle": sl.handle.id if sl.handle is not None else None, "slice": sl.k,
            "request": request if sl.k > 1 else None, "messages_in": msg_ids + ctx.claimed}})
        result = replace(result, world=world)
        env.client.record_turn(sl.agent, result)
    out, looping = _commit(env, sl, result, msg_ids + ctx.claimed, hops_in,
                           request if request is not None else turn_input, ctx)
    if not looping:  # no loop of the session ran at load and at commit: no step to take
        return out
    return after_logical_turn(env, sl, result, out)


def _running(s: Any, sl: _Slice) -> None:
    """The turn runs (it holds the lease and has input): lifecycle ``running``, in ``s``."""
    fresh = s.get(AgentRuntimeRow, sl.agent)
    if fresh is not None and fresh.lifecycle not in ("deleted", "failed"):
        set_lifecycle(s, fresh, "running", "runtime", f"turn {sl.io}")


def _budget_left(env: TurnEnv, sl: _Slice) -> dict[str, Any]:
    """``budget_get``: the day's spend and caps of the tree, and this turn's grant."""
    spent = env.budget.totals(sl.rt.root_id, sl.agent, sl.day)
    caps = {d: getattr(sl.caps, d) for d in ("tokens", "agent_tokens", "usd", "turns", "spawns", "messages")}
    return {"day": sl.day, "turn_grant_tokens": sl.grant, "spent": asdict(spent), "caps": caps}


def profile_tools(rt: AgentRuntimeRow) -> list[str]:
    """The tools granted to ``rt`` by its profile."""
    return [str(t) for t in rt.profile.get("tools", [])]


def _stored_or_run(env: TurnEnv, sl: _Slice, turn_input: Any, ctx: ToolContext,
                   own_spec: dict[str, Any] | None) -> TurnResult:
    """The stored world's turn when an earlier attempt of the io recorded one (its world is kept:
    ``world=None`` here), else a K0 run. A stored slice that yielded is run again: the world does not
    hold the pending wait (docs/runtime/failures.md), and the re-run's spawns return the first handles."""
    with env.factory() as s:
        stored = db.world_by_io(s, sl.agent, sl.io)
        stored_world = None if stored is None else stored.world
    if stored_world is not None and stored_world["outcome"]["termination_reason"] != "AWAITING_CHILDREN":
        out = stored_world["outcome"]
        return TurnResult(answer=out["final_text"], status=out["status"],
                          termination_reason=out["termination_reason"], world=None, trajectory={},
                          params_read=[], policy_tokens=out["policy_tokens"], steps=out["steps"],
                          transcript=out["transcript"], pending=None)
    rt, profile = sl.rt, sl.rt.profile
    system_parts = [tuple(p) for p in profile.get("system_parts", [])]
    kwargs = dict(profile.get("kwargs", {}))
    kwargs["max_turn_tokens"] = sl.grant
    if own_spec is not None:
        system_parts.append((f"spec:{rt.spec}", own_spec["instructions"]))
        kwargs["max_iterations"] = min(int(own_spec["max_iterations"]), int(kwargs.get("max_iterations", 20)))
    plan = TurnPlan(input=turn_input, agent_id=sl.agent, io_id=sl.io, interaction_id=sl.session,
                    session_id=sl.session, provider=profile["provider"], model=profile["model"],
                    system_parts=system_parts, messages=list(sl.row.messages), tools=runtime_tools(ctx),
                    kwargs=kwargs, turn_notes=goal_notes_of(sl.facts.goal))
    cancel_key = keys.handle_cancel(sl.handle.id) if sl.handle is not None else None
    deadline = time.monotonic() + env.params.child_timeout_s
    redis = env.client.redis

    def cancelled() -> bool:
        return time.monotonic() > deadline or (cancel_key is not None and bool(redis.exists(cancel_key)))

    harness = env.client.current_harness(sl.agent)
    model = env.model if env.models is None else env.models(profile["provider"], profile["model"])
    return run_turn(plan, harness, model, record_world=True, cancelled=cancelled)


def _charge_of(sl: _Slice, result: TurnResult) -> Charge:
    tin = sum(int(r.get("input_tokens", 0)) for r in result.ledger)
    tout = sum(int(r.get("output_tokens", 0)) for r in result.ledger)
    blocks = [b for m in result.transcript
              if m.get("role") == "assistant" and isinstance(m.get("content"), list) for b in m["content"]]
    tool_calls = len([b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"])
    return Charge(turn_key(sl.agent, sl.io), "turn", sl.rt.root_id, sl.agent, tokens=result.policy_tokens,
                  usd=usd_of(sl.price, tin, tout), model_calls=len(result.ledger), tool_calls=tool_calls,
                  turns=1 if sl.k == 1 else 0)


_SESSIONS: sa.Table = SessionRow.__table__  # type: ignore[assignment]
# built once (docs/runtime/turn-cost.md); a Core statement: the commit's session holds no SessionRow
_SESSION_COMMIT = sa.update(_SESSIONS).where(
    _SESSIONS.c.id == sa.bindparam("row"), _SESSIONS.c.version == sa.bindparam("version")).values(
    version=sa.bindparam("new_version"), turns=sa.bindparam("turns"), slice=sa.bindparam("slice"),
    pending=sa.bindparam("pending", type_=_SESSIONS.c.pending.type),
    wait_deadline=sa.bindparam("wait_deadline", type_=_SESSIONS.c.wait_deadline.type),
    messages=sa.bindparam("messages", type_=_SESSIONS.c.messages.type))


def _commit(env: TurnEnv, sl: _Slice, result: TurnResult, consumed_ids: list[str], hops_in: int,
            request: Any, ctx: ToolContext) -> tuple[TurnOutcome, bool]:
    """Step 7: one transaction, optimistic on ``rsi_sessions.version``; then step 8. Returns the
    outcome and whether the session's loop is to be stepped (running at load and at commit)."""
    redis, params, handle = env.client.redis, env.params, sl.handle
    yielded = result.pending is not None
    spend = _charge_of(sl, result)
    settled: list[str] = []
    with env.factory.begin() as s:
        pend, deadline = None, None
        if yielded:
            now = s.execute(sa.select(db_now())).scalar_one()
            waits = (result.pending or {})["waits"]
            pend = {**(result.pending or {}), "hops_in": hops_in, "request": request}
            deadline = now + timedelta(seconds=min(float(w["timeout_s"]) for w in waits.values()))
        done: Any = s.execute(_SESSION_COMMIT, {
            "row": sl.row.id, "version": sl.row.version, "new_version": sl.row.version + 1, "turns": sl.n,
            "slice": sl.k if yielded else 0, "pending": pend, "wait_deadline": deadline,
            "messages": list(sl.row.messages) + list(result.transcript)})
        if not done.rowcount or (consumed_ids and consume(s, consumed_ids, sl.io) < len(consumed_ids)):
            s.rollback()
            env.budget.release(sl.res_id, sl.rt.root_id)
            return TurnOutcome("conflict", sl.io), False
        inserted = charge(s, spend, sl.day)
        commit_goal(s, sl.agent, sl.session, sl.io, spend.tokens, result.transcript,
                    env.client.settings.check_factory)
        if handle is not None and sl.n == 1:
            if yielded:
                s.execute(sa.update(SubagentRow).where(
                    SubagentRow.id == handle.id, SubagentRow.status.in_(("queued", "running")))
                    .values(status="awaiting"))
            else:
                ok = result.status == "completed"
                error = None if ok else f"{result.status}:{result.termination_reason}"
                if settle(s, handle.id, "completed" if ok else "failed", answer=result.answer, error=error):
                    settled.append(handle.id)
        fresh = s.get(AgentRuntimeRow, sl.agent)
        if fresh is not None:
            set_lifecycle(s, fresh, "idle", "runtime", f"turn {sl.io} committed")
        if result.status == "blocked" and result.termination_reason == "COST_BUDGET":
            add_event(s, sl.agent, "cap", "runtime", dim="reservation", action="turn", io=sl.io)
        more = s.execute(sa.select(sa.func.count()).select_from(MessageRow).where(
            MessageRow.recipient == sl.agent, MessageRow.session_id == sl.session,
            MessageRow.consumed_io.is_(None))).scalar_one()
        # a loop is stepped only if it was running when the turn loaded and still is (no read otherwise)
        looping = sl.facts.loop is not None and not yielded and loop_running(s, sl.agent, sl.session)
    env.budget.settle(sl.res_id, sl.rt.root_id, sl.day, spend if inserted else None, sl.agent)
    if settled and handle is not None:
        after_settle(redis, settled, cancelled=False, ttl_s=params.child_timeout_s)
        env.wake(handle.parent_agent, handle.parent_session)
    if ctx.spawned:
        with env.factory() as s:
            for h in ctx.spawned:
                child = s.get(SubagentRow, h)
                if child is not None:
                    env.wake(child.child_agent, h)
    for box in wake_after_commit(redis, ctx.mailboxes):
        env.wake(box.agent, box.session)
    start_refines(env.client, sl.agent, ctx.refines)
    if more and not yielded:
        env.wake(sl.agent, sl.session)
    return TurnOutcome("ran", sl.io, result.status, result.answer), looping


def marked_wake(redis: Any, enqueue: Callable[[str, str], Any]) -> Callable[[str, str], None]:
    """The cluster's wake: ``SET NX rsi:{a}:wake:{s}`` (300 s) and enqueue a turn only when the mark is
    new; the turn deletes the mark when it starts, and re-wakes itself when a mark appeared while it
    ran (a wake that found it busy)."""

    def wake(agent: str, session: str) -> None:
        if redis.set(keys.wake(agent, session), "1", nx=True, ex=keys.WAKE_TTL_S):
            enqueue(agent, session)

    return wake


def drain(env: TurnEnv, queue: deque[tuple[str, str]], *, max_turns: int = 10_000) -> list[TurnOutcome]:
    """The inline driver: run queued ``(agent, session)`` turns until the queue is empty (tests, the
    demo, embedded mode). Returns every outcome in order."""
    out: list[TurnOutcome] = []
    while queue and len(out) < max_turns:
        agent, session = queue.popleft()
        out.append(run_session_turn(env, agent, session))
    return out

