"""Autonomous mode (docs/runtime/goals.md#autonomy): one loop per cluster agent that keeps posting
continuations to its session until a rule stops it.

:func:`after_logical_turn` is step 8's hook of every committed slice (``rsi_common/runtime/turns.py``).
After a logical turn ends (not a yielded slice) it counts the turn's tokens and USD from the ledger and
applies the first matching rule:

1. the goal is done → ``completed/goal_complete``;
2. the check passes → ``completed/check_pass`` (even past a limit);
3. the check says ``integrity_ok = false`` → the turn's worlds are tainted, ``stopped/integrity``;
4. the turn ended ``blocked`` (not by its token grant) or ``failed``/``cancelled`` →
   ``stopped/blocked`` or ``stopped/turn_failed``;
5. a budget is reached → ``stopped/budget:<turns|tokens|usd|wall|goal_tokens>``;
6. the tree's or the agent's daily cap leaves no next turn → ``stopped/cap:<dim>`` (a turn refused
   by a cap before it runs stops the loop the same way, :func:`stop_on_cap`);
7. three tool-less turns in a row with the same final-text hash → ``stopped/stalled``;
8. an operator stopped the loop (:func:`stop_autonomy`, checked first: the loop is no longer running);
9. otherwise the message ``Continue toward the goal. (continuation <i> of <max>)`` plus the check's
   reason (≤ 6,000 characters) is posted to the session (key ``au:{loop}:{i}``) and the session woken.

Every transition is an ``rsi_events`` row of kind ``autonomy`` written in the transaction that makes it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams
from rsi_common.db.models import WorldRow
from rsi_common.db.runtime_models import (
    AgentRuntimeRow,
    AutonomyRow,
    GoalRow,
    MessageRow,
    SessionRow,
    SpendRow,
)
from rsi_common.db.sqltypes import db_now
from rsi_common.db.worlds import lock_agent_before_worlds
from rsi_common.errors import InvalidInput
from rsi_common.kernel.types import TurnResult
from rsi_common.runtime import keys
from rsi_common.runtime.budget import Budget
from rsi_common.runtime.caps import Caps, DayTotals, first_exceeded, resolve_caps
from rsi_common.runtime.checks import MAX_REASON_CHARS, CheckContext, CheckResult, run_check, tool_calls_of
from rsi_common.runtime.checks import validate_check as _validate_check
from rsi_common.runtime.goals import goal_remainder, latest_goal
from rsi_common.runtime.ids import new_id
from rsi_common.runtime.spend import db_day
from rsi_common.runtime.tree import add_event, get_runtime


class _Env(Protocol):
    """What the hook reads of :class:`~rsi_common.runtime.turns.TurnEnv` (no import: turns calls this)."""

    client: RsiClient
    budget: Budget

    def wake(self, agent: str, session: str) -> None: ...

    @property
    def factory(self) -> Any: ...


class _Slice(Protocol):
    """What the hook reads of the committed slice."""

    @property
    def rt(self) -> AgentRuntimeRow: ...

    @property
    def caps(self) -> Caps: ...

    @property
    def day(self) -> str: ...

    @property
    def agent(self) -> str: ...

    @property
    def session(self) -> str: ...

    @property
    def logical(self) -> str: ...


class _Outcome(Protocol):
    @property
    def outcome(self) -> str: ...


_O = TypeVar("_O", bound=_Outcome)

__all__ = ["DEFAULT_BUDGET", "START_TEXT", "after_logical_turn", "autonomy_json", "continuation_text",
           "loop_running", "recover_steps", "reserve_want", "running_loop", "start_autonomy", "stop_autonomy",
           "stop_on_cap", "want_of"]

DEFAULT_BUDGET: dict[str, Any] = {"max_turns": 12, "max_tokens": 80_000, "max_usd": None, "max_wall_s": 1800}
START_TEXT = "Start working toward the goal."
STALL_TURNS = 3
_LIMITS = {"max_turns": 10_000, "max_tokens": 10**10, "max_wall_s": 30 * 86_400}


def continuation_text(i: int, max_turns: int, reason: str | None) -> str:
    """The continuation message: ``Continue toward the goal. (continuation <i> of <max>)`` and, on its
    own lines, the check's reason clipped to 6,000 characters."""
    text = f"Continue toward the goal. (continuation {i} of {max_turns})"
    return f"{text}\n{reason[:MAX_REASON_CHARS]}" if reason else text


def autonomy_json(row: AutonomyRow) -> dict[str, Any]:
    """A loop as the host API shows it."""
    return {"id": row.id, "agent": row.agent_id, "session": row.session, "status": row.status,
            "reason": row.reason, "budget": row.budget, "check": row.check, "turns": row.turns,
            "tokens": int(row.tokens), "usd": float(row.usd)}


def _budget(raw: Any) -> dict[str, Any]:
    if raw is None:
        return dict(DEFAULT_BUDGET)
    if not isinstance(raw, dict):
        raise InvalidInput("budget must be an object {max_turns, max_tokens, max_usd, max_wall_s}")
    unknown = sorted(str(k)[:32] for k in raw if k not in DEFAULT_BUDGET)
    if unknown:
        raise InvalidInput(f"budget has unknown keys: {', '.join(unknown)}")
    out = {**DEFAULT_BUDGET, **raw}
    for key, top in _LIMITS.items():
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
            raise InvalidInput(f"budget.{key} must be an integer from 1 to {top}")
    usd = out["max_usd"]
    if usd is not None and (isinstance(usd, bool) or not isinstance(usd, int | float)
                            or not math.isfinite(usd) or usd <= 0):
        raise InvalidInput("budget.max_usd must be a finite number > 0, or null")
    return out


def _running(s: Session, agent: str) -> AutonomyRow | None:
    stmt = sa.select(AutonomyRow).where(AutonomyRow.agent_id == agent, AutonomyRow.status == "running")
    if s.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    return s.execute(stmt.limit(1)).scalar_one_or_none()


def start_autonomy(s: Session, agent: str, budget: Any = None, check: Any = None, *,
                   check_factory: str | None, actor: str, session: str = "main") -> AutonomyRow:
    """Start the agent's loop and post its first message (``Start working toward the goal.``), inside
    the caller's transaction; the caller wakes ``(agent, session)`` after the commit.

    Raises:
        InvalidInput: a bad field (named), a host or deleted agent, or a loop already running.
        UnknownAgentError: the agent is not registered.
    """
    plan, name = _budget(budget), _validate_check(check_factory, check)
    rt = get_runtime(s, agent, lock=True)
    if rt.lifecycle == "deleted":
        raise InvalidInput(f"agent {agent!r} is deleted")
    if rt.profile.get("runs_on", "cluster") != "cluster":
        raise InvalidInput(f"agent {agent!r} runs on the host; autonomous loops run cluster agents")
    current = _running(s, agent)
    if current is not None:
        raise InvalidInput(f"autonomy_running: agent {agent!r} already runs loop {current.id}")
    row = AutonomyRow(id=new_id("au"), agent_id=agent, session=session, status="running", budget=plan,
                      check=name, turns=0, tokens=0, usd=0.0, stall=[])
    s.add(row)
    s.flush()
    s.add(MessageRow(id=new_id("m"), key=f"au:{row.id}:0", kind="continuation", sender=None,
                     relationship="operator", recipient=agent, session_id=session, text=START_TEXT, hops=0,
                     root_id=rt.root_id))
    add_event(s, agent, "autonomy", actor, loop=row.id, to="running", budget=plan, check=name)
    s.flush()
    return row


def stop_autonomy(s: Session, agent: str, *, actor: str) -> AutonomyRow:
    """Stop the agent's loop (``stopped/operator``) and withdraw its unclaimed continuation; a turn
    already running finishes, and no continuation follows it.

    Raises:
        InvalidInput: no loop is running.
    """
    row = _running(s, agent)
    if row is None:
        raise InvalidInput(f"agent {agent!r} runs no autonomous loop")
    _finish(s, row, "stopped", "operator", actor)
    s.execute(sa.delete(MessageRow).where(MessageRow.key.like(f"au:{row.id}:%"),
                                          MessageRow.consumed_io.is_(None), MessageRow.claimed_io.is_(None)))
    return row


def stop_on_cap(s: Session, agent: str, dim: str) -> bool:
    """A turn of the agent was refused by a cap (docs/runtime/accounting.md#reservation): its running
    loop stops (``stopped/cap:<dim>``, R5 "autonomy stops"), inside the caller's transaction."""
    row = _running(s, agent)
    if row is None:
        return False
    _finish(s, row, "stopped", f"cap:{dim}", "runtime")
    return True


def _finish(s: Session, row: AutonomyRow, status: str, reason: str, actor: str) -> None:
    row.status, row.reason = status, reason
    row.finished_at = s.execute(sa.select(db_now())).scalar_one()
    add_event(s, row.agent_id, "autonomy", actor, loop=row.id, to=status, reason=reason, turns=row.turns,
              tokens=int(row.tokens))


def reserve_want(factory: sessionmaker[Session], agent: str, want: int) -> int:
    """``want`` bounded by the active goal's and the running loop's remaining tokens (at least 1: a
    spent goal or loop has already ended)."""
    with factory() as s:
        return want_of(want, goal_remainder(s, agent), running_loop(s, agent))


def running_loop(s: Session, agent: str) -> AutonomyRow | None:
    """The agent's ``running`` loop (a turn reads it once, when it loads)."""
    return s.execute(sa.select(AutonomyRow).where(AutonomyRow.agent_id == agent,
                                                  AutonomyRow.status == "running")).scalars().first()


def want_of(want: int, goal_left: int | None, loop: AutonomyRow | None) -> int:
    """:func:`reserve_want` of a goal remainder and a running loop already read."""
    bounds = [want, goal_left]
    if loop is not None:
        bounds.append(int(loop.budget["max_tokens"]) - int(loop.tokens))
    return max(1, min(b for b in bounds if b is not None))


def _turn_spend(s: Session, agent: str, logical: str) -> tuple[int, float]:
    key = f"turn:{agent}:{logical}"
    tokens, usd = s.execute(sa.select(sa.func.coalesce(sa.func.sum(SpendRow.tokens), 0),
                                      sa.func.coalesce(sa.func.sum(SpendRow.usd), 0.0)).where(
        SpendRow.agent_id == agent, sa.or_(SpendRow.key == key, SpendRow.key.like(f"{key}+%")))).one()
    return int(tokens), float(usd)


def _taint(s: Session, agent: str, logical: str, reason: str) -> int:
    lock_agent_before_worlds(s, agent)
    done: Any = s.execute(sa.update(WorldRow).where(
        WorldRow.agent_id == agent, sa.or_(WorldRow.io_id == logical, WorldRow.io_id.like(f"{logical}+%")))
        .values(tainted=True, taint_reason=reason[:300]))
    add_event(s, agent, "taint", "runtime", io=logical, reason=reason[:300], worlds=int(done.rowcount))
    return int(done.rowcount)


def after_logical_turn(env: _Env, sl: _Slice, result: TurnResult, out: _O, *, expect_turns: int | None = None
                       ) -> _O:
    """Step the agent's loop after a committed logical turn (module docstring); returns ``out``.
    ``expect_turns`` (the tick's recovery) steps only a loop that has counted exactly that many turns."""
    if out.outcome != "ran" or result.pending is not None:
        return out
    with env.factory() as s:
        if not loop_running(s, sl.agent, sl.session):
            return out
    spent = env.budget.totals(sl.rt.root_id, sl.agent, sl.day)  # read before the write transaction
    with env.factory.begin() as s:
        loop = _running(s, sl.agent)
        if loop is None or loop.session != sl.session or expect_turns not in (None, loop.turns):
            return out
        woke = _step(env, s, sl, loop, result, spent)
    if woke:
        env.wake(sl.agent, sl.session)
    return out


def loop_running(s: Session, agent: str, session: str) -> bool:
    """Whether ``agent``'s ``session`` has a running loop."""
    return s.execute(sa.select(AutonomyRow.id).where(
        AutonomyRow.agent_id == agent, AutonomyRow.session == session,
        AutonomyRow.status == "running")).first() is not None


def _step(env: _Env, s: Session, sl: _Slice, loop: AutonomyRow, result: TurnResult,
          spent: DayTotals) -> bool:
    """Apply the rules to ``loop``; ``True`` when a continuation was posted."""
    now = s.execute(sa.select(db_now())).scalar_one()
    tokens, usd = _turn_spend(s, sl.agent, sl.logical)
    loop.turns, loop.tokens, loop.usd = loop.turns + 1, int(loop.tokens) + tokens, float(loop.usd) + usd
    goal = latest_goal(s, sl.agent)
    if goal is not None and goal.status not in ("active", "paused") and goal.updated_at < loop.started_at:
        goal = None  # a goal that ended before this loop began is not this loop's goal
    if goal is not None and goal.status == "completed":
        _finish(s, loop, "completed", "goal_complete", "runtime")
        return False
    calls = tool_calls_of(result.transcript)
    check = loop.check or (goal.check if goal is not None else None)
    verdict: CheckResult | None = None
    if check is not None:
        verdict = run_check(env.client.settings.check_factory, check, CheckContext(
            sl.agent, sl.session, goal.objective if goal is not None else "", result.answer, calls,
            tuple(result.transcript)))
    reason = _rule(sl, loop, result, goal, verdict, calls, now, spent)
    if reason == "integrity" and verdict is not None:
        _taint(s, sl.agent, sl.logical, verdict.reason)
    if reason is not None:
        _finish(s, loop, "completed" if reason == "check_pass" else "stopped", reason, "runtime")
        return False
    text = continuation_text(loop.turns, int(loop.budget["max_turns"]), verdict.reason if verdict else None)
    s.add(MessageRow(id=new_id("m"), key=f"au:{loop.id}:{loop.turns}", kind="continuation", sender=None,
                     relationship="operator", recipient=sl.agent, session_id=sl.session, text=text, hops=0,
                     root_id=sl.rt.root_id))
    add_event(s, sl.agent, "autonomy", "runtime", loop=loop.id, to="continue", continuation=loop.turns)
    return True


def _rule(sl: _Slice, loop: AutonomyRow, result: TurnResult, goal: GoalRow | None,
          verdict: CheckResult | None, calls: tuple[str, ...], now: Any, spent: DayTotals) -> str | None:
    """Rules 2–7 (module docstring): the reason the loop ends, or ``None`` to continue."""
    if verdict is not None and verdict.ok:
        return "check_pass"
    if verdict is not None and not verdict.integrity_ok:
        return "integrity"
    granted_out = result.status == "blocked" and result.termination_reason == "COST_BUDGET"
    if result.status == "blocked" and not granted_out:
        return "blocked"
    if result.status in ("failed", "cancelled"):
        return "turn_failed"
    b = loop.budget
    wall_s = (now - loop.started_at).total_seconds()
    used: tuple[tuple[str, float, Any], ...] = (
        ("turns", loop.turns, b["max_turns"]), ("tokens", loop.tokens, b["max_tokens"]),
        ("usd", loop.usd, b["max_usd"]), ("wall", wall_s, b["max_wall_s"]))
    for name, amount, cap in used:
        if cap is not None and amount >= cap:
            return f"budget:{name}"
    if goal is not None and goal.status == "budget_exhausted":
        return "budget:goal_tokens"
    dim = first_exceeded(sl.caps, spent, DayTotals(turns=1))
    if dim is not None:
        return f"cap:{dim}"
    if granted_out:
        return "blocked"
    if calls:
        loop.stall = []
        return None
    digest = hashlib.sha256(result.answer.encode("utf-8")).hexdigest()[:16]
    loop.stall = [*list(loop.stall)[-(STALL_TURNS - 1):], digest]
    if len(loop.stall) == STALL_TURNS and len(set(loop.stall)) == 1:
        return "stalled"
    return None


@dataclass(frozen=True)
class _Lost:
    """The slice whose step a killed worker lost, rebuilt from SQL (satisfies :class:`_Slice`)."""

    rt: AgentRuntimeRow
    caps: Caps
    day: str
    agent: str
    session: str
    logical: str


@dataclass(frozen=True)
class _Ran:
    outcome: str = "ran"


def recover_steps(env: _Env, params: RuntimeParams, *, limit: int = 500) -> int:
    """The tick's sweep: re-run the step a killed worker lost between a turn's commit and its step.

    A running loop whose last continuation ``au:{loop}:{i}`` is consumed while the loop has counted
    only ``i`` turns, with no turn of its session holding the lease and no wait pending, lost the step
    of the turn that consumed it; the step runs again from that turn's stored world (the last slice).
    Returns how many steps ran."""
    with env.factory() as s:
        loops = list(s.execute(sa.select(AutonomyRow).where(AutonomyRow.status == "running").limit(limit))
                     .scalars())
    done = 0
    for loop in loops:
        if env.client.redis.exists(keys.turn_lease(loop.agent_id, loop.session)):
            continue
        with env.factory() as s:
            last = s.execute(sa.select(MessageRow).where(MessageRow.key.like(f"au:{loop.id}:%")).order_by(
                MessageRow.seq.desc()).limit(1)).scalar_one_or_none()
            if last is None or last.consumed_io is None or int(last.key.rsplit(":", 1)[1]) != loop.turns:
                continue
            logical = last.consumed_io.split("+", 1)[0]
            row = s.execute(sa.select(SessionRow).where(
                SessionRow.agent_id == loop.agent_id, SessionRow.session == loop.session)
            ).scalar_one_or_none()
            world = s.execute(sa.select(WorldRow).where(
                WorldRow.agent_id == loop.agent_id,
                sa.or_(WorldRow.io_id == logical, WorldRow.io_id.like(f"{logical}+%"))).order_by(
                WorldRow.seq.desc()).limit(1)).scalar_one_or_none()
            if row is None or row.pending is not None or world is None:
                continue
            rt = get_runtime(s, loop.agent_id)
            caps = resolve_caps(params, get_runtime(s, rt.root_id).caps)
            lost = _Lost(rt, caps, db_day(s), loop.agent_id, loop.session, logical)
            out = world.world["outcome"]
        result = TurnResult(answer=out["final_text"], status=out["status"],
                            termination_reason=out["termination_reason"], world=None, trajectory={},
                            params_read=[], policy_tokens=out["policy_tokens"], steps=out["steps"],
                            transcript=out["transcript"], pending=None)
        after_logical_turn(env, lost, result, _Ran(), expect_turns=loop.turns)
        done += 1
    return done
