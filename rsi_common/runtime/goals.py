"""Goals (docs/runtime/goals.md#goals): at most one ``active`` or ``paused`` goal per agent, set only
by operators and hosts; the recorded note of every turn; the tools ``goal_get`` and
``goal_complete``; the goal's token usage, completion and exhaustion written in the turn's commit.

``goal_complete(summary)`` runs the goal's check and returns its verdict as the recorded tool result
``{"complete", "goal", "reason"}``; it writes nothing. The turn's commit completes the goal when its
transcript holds a passing ``goal_complete`` result for that goal and the check, run again on the
whole turn, keeps ``integrity_ok`` (decision D21): the goal changes exactly when the world commits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db.runtime_models import GoalRow
from rsi_common.errors import InvalidInput
from rsi_common.kernel.types import ToolDef
from rsi_common.runtime.checks import MAX_REASON_CHARS, CheckContext, run_check, tool_calls_of, validate_check
from rsi_common.runtime.host_checks import check_text_field
from rsi_common.runtime.ids import new_id
from rsi_common.runtime.tree import add_event, get_runtime

__all__ = ["LIVE_GOAL", "MAX_OBJECTIVE_CHARS", "GoalRow", "active_goal", "commit_goal", "goal_json",
           "goal_notes", "goal_notes_of", "goal_remainder", "goal_remainder_of", "goal_tools",
           "goal_tools_of", "latest_goal", "live_goal", "set_goal", "update_goal"]

LIVE_GOAL: tuple[str, ...] = ("active", "paused")
MAX_OBJECTIVE_CHARS = 4000
MAX_GOAL_TOKENS = 10**10
_FAMILY = "rsi.runtime"


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def live_goal(s: Session, agent: str) -> GoalRow | None:
    """The agent's ``active`` or ``paused`` goal."""
    return s.execute(sa.select(GoalRow).where(GoalRow.agent_id == agent, GoalRow.status.in_(LIVE_GOAL))
                     .order_by(GoalRow.created_at.desc()).limit(1)).scalar_one_or_none()


def latest_goal(s: Session, agent: str) -> GoalRow | None:
    """The agent's live goal, else its most recent one."""
    live_first = sa.case((GoalRow.status.in_(LIVE_GOAL), 0), else_=1)
    return s.execute(sa.select(GoalRow).where(GoalRow.agent_id == agent).order_by(
        live_first, GoalRow.updated_at.desc(), GoalRow.created_at.desc()).limit(1)).scalar_one_or_none()


def active_goal(s: Session, agent: str) -> GoalRow | None:
    """The agent's ``active`` goal (a turn reads it once, when it loads: docs/runtime/turn-cost.md)."""
    row = live_goal(s, agent)
    return row if row is not None and row.status == "active" else None


_active = active_goal


def goal_json(row: GoalRow) -> dict[str, Any]:
    """A goal as ``goal_get`` and the host API show it."""
    return {"id": row.id, "agent": row.agent_id, "objective": row.objective, "status": row.status,
            "tokens_used": int(row.tokens_used), "token_budget": row.token_budget, "check": row.check,
            "reason": row.reason}


def _objective(value: Any) -> str:
    text = check_text_field(value, "objective", MAX_OBJECTIVE_CHARS).strip()
    if not text:
        raise InvalidInput("objective must be a non-empty string")
    return text


def _budget(value: Any, used: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GOAL_TOKENS:
        raise InvalidInput(f"token_budget must be an integer from 1 to {MAX_GOAL_TOKENS}")
    if value <= used:
        raise InvalidInput(f"token_budget must exceed the {used} tokens the goal has used")
    return value


def set_goal(s: Session, agent: str, objective: Any, token_budget: Any, check: Any, *,
             check_factory: str | None, actor: str) -> GoalRow:
    """Set the agent's goal, inside the caller's transaction.

    Raises:
        InvalidInput: a bad field (named), a deleted agent, or a live goal already set
            (``goal_exists``: cancel or complete it first).
        UnknownAgentError: the agent is not registered.
    """
    text, budget = _objective(objective), _budget(token_budget)
    name = validate_check(check_factory, check)
    rt = get_runtime(s, agent, lock=True)  # serialises two operators setting a goal at once
    if rt.lifecycle == "deleted":
        raise InvalidInput(f"agent {agent!r} is deleted")
    current = live_goal(s, agent)
    if current is not None:
        raise InvalidInput(f"goal_exists: agent {agent!r} has the {current.status} goal {current.id}; "
                           "cancel it with update_goal first")
    row = GoalRow(id=new_id("g"), agent_id=agent, objective=text, token_budget=budget, tokens_used=0,
                  check=name, status="active")
    s.add(row)
    add_event(s, agent, "goal", actor, goal=row.id, to="active", check=name, token_budget=budget)
    s.flush()
    return row


_MOVES = {("active", "paused"), ("paused", "active"), ("active", "cancelled"), ("paused", "cancelled")}


def update_goal(s: Session, agent: str, *, status: Any = None, objective: Any = None,
                token_budget: Any = None, actor: str) -> GoalRow:
    """Pause, resume or cancel the agent's live goal, or change its objective or budget.

    Raises:
        InvalidInput: no live goal, a bad field (named), or a move other than active ↔ paused → cancelled.
    """
    get_runtime(s, agent, lock=True)
    row = live_goal(s, agent)
    if row is None:
        raise InvalidInput(f"agent {agent!r} has no active or paused goal")
    if status is None and objective is None and token_budget is None:
        raise InvalidInput("give status, objective or token_budget")
    text = _objective(objective) if objective is not None else None
    budget = _budget(token_budget, int(row.tokens_used)) if token_budget is not None else None
    if status is not None and (not isinstance(status, str) or (row.status, status) not in _MOVES):
        shown = status[:32] if isinstance(status, str) else type(status).__name__
        raise InvalidInput(f"status: a {row.status} goal cannot become {shown!r} "
                           "(active ↔ paused, either → cancelled)")
    detail: dict[str, Any] = {"goal": row.id}
    if text is not None:
        row.objective, detail["objective"] = text, True
    if budget is not None:
        row.token_budget = detail["token_budget"] = budget
    if status is not None:
        detail.update({"from": row.status, "to": status})
        row.status = status
    add_event(s, agent, "goal", actor, **detail)
    s.flush()
    return row


def goal_notes(factory: sessionmaker[Session], agent: str) -> list[str]:
    """The turn's recorded note ``Goal: <objective> (tokens used <u> of <budget>)`` when a goal is
    active (the turn's ``plan.turn_notes``, so the world records it and a replay shows it again)."""
    with factory() as s:
        return goal_notes_of(_active(s, agent))


def goal_notes_of(row: GoalRow | None) -> list[str]:
    """:func:`goal_notes` of an active goal already read (``None``: no active goal)."""
    if row is None:
        return []
    return [f"Goal: {row.objective} (tokens used {int(row.tokens_used)} of {row.token_budget})"]


def goal_remainder(s: Session, agent: str) -> int | None:
    """Tokens the active goal has left (``None``: no active goal)."""
    return goal_remainder_of(_active(s, agent))


def goal_remainder_of(row: GoalRow | None) -> int | None:
    """:func:`goal_remainder` of an active goal already read."""
    if row is None or row.token_budget is None:
        return None
    return max(0, int(row.token_budget) - int(row.tokens_used))


def goal_tools(factory: sessionmaker[Session], agent: str, session: str, check_factory: str | None
               ) -> list[ToolDef]:
    """``goal_get`` and ``goal_complete``, offered only while the agent has an active goal."""
    with factory() as s:
        row = _active(s, agent)
        goal_id = None if row is None else row.id
    return goal_tools_of(goal_id, factory, agent, session, check_factory)


def goal_tools_of(goal_id: str | None, factory: sessionmaker[Session], agent: str, session: str,
                  check_factory: str | None) -> list[ToolDef]:
    """:func:`goal_tools` for the active goal ``goal_id`` already read (``None``: no tools); the tools
    read the goal again when called."""
    if goal_id is None:
        return []

    def get(_args: dict[str, Any]) -> str:
        with factory() as s:
            current = s.get(GoalRow, goal_id)
            return _json({"goal": goal_json(current) if current is not None else None})

    def complete(args: dict[str, Any]) -> str:
        summary = args.get("summary", "")
        if not isinstance(summary, str):
            summary = ""
        summary = summary[:MAX_REASON_CHARS]
        with factory() as s:
            current = s.get(GoalRow, goal_id)
            if current is None or current.status != "active":
                return _json({"complete": False, "goal": goal_id, "reason": "the goal is no longer active"})
            objective, check = current.objective, current.check
        if check is None:
            return _json({"complete": True, "goal": goal_id, "reason": "the goal has no check"})
        verdict = run_check(check_factory, check, CheckContext(agent, session, objective, summary))
        return _json({"complete": verdict.ok, "goal": goal_id, "reason": verdict.reason})

    obj = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}
    return [
        ToolDef("goal_get", "Your current goal and its token usage.", family=_FAMILY, read_only=True,
                executor=get),
        ToolDef("goal_complete", "Claim the goal is complete; an independent check decides.", obj,
                family=_FAMILY, executor=complete),
    ]


def _claim(transcript: Sequence[Mapping[str, Any]], goal_id: str) -> str | None:
    """The summary of a passing ``goal_complete`` call for ``goal_id`` in ``transcript``, or ``None``."""
    calls: dict[str, str] = {}
    for m in transcript:
        content = m.get("content")
        for b in content if isinstance(content, list) else []:
            if not isinstance(b, dict):
                continue
            if b.get("type") == "tool_use" and b.get("name") == "goal_complete":
                summary = (b.get("input") or {}).get("summary") if isinstance(b.get("input"), dict) else ""
                calls[str(b.get("id"))] = summary if isinstance(summary, str) else ""
            elif (b.get("type") == "tool_result" and str(b.get("tool_use_id")) in calls
                  and not b.get("is_error")):
                try:
                    out = json.loads(b["content"]) if isinstance(b.get("content"), str) else {}
                except ValueError:
                    continue
                if isinstance(out, dict) and out.get("complete") is True and out.get("goal") == goal_id:
                    return calls[str(b.get("tool_use_id"))][:MAX_REASON_CHARS]
    return None


def commit_goal(s: Session, agent: str, session: str, io: str, tokens: int,
                transcript: Sequence[Mapping[str, Any]], check_factory: str | None) -> str | None:
    """Inside the turn's commit: add the slice's ``tokens`` to the active goal, complete it on a passing
    claim (the check re-run on the whole turn keeps integrity), else mark it ``budget_exhausted`` when
    its budget is spent. Returns the goal's new status when it changed."""
    # one statement finds the active goal and adds the tokens, atomic on the row: two sessions of
    # one agent may commit at once (at most one goal is live: set_goal)
    row = s.execute(sa.update(GoalRow).where(GoalRow.agent_id == agent, GoalRow.status == "active").values(
        tokens_used=GoalRow.tokens_used + max(0, int(tokens))).returning(GoalRow)
        .execution_options(synchronize_session=False, populate_existing=True)).scalars().first()
    if row is None:
        return None
    summary = _claim(transcript, row.id)
    new: str | None = None
    reason = ""
    if summary is not None:
        verdict = None
        if row.check is not None:
            verdict = run_check(check_factory, row.check, CheckContext(
                agent, session, row.objective, summary, tool_calls_of(transcript), tuple(transcript)))
        if verdict is None or verdict.ok:
            new, reason = "completed", summary or "completed"
        else:
            add_event(s, agent, "goal", "runtime", goal=row.id, io=io, refused="complete",
                      reason=verdict.reason[:300])
    if new is None and row.token_budget is not None and row.tokens_used >= row.token_budget:
        new, reason = "budget_exhausted", f"{row.tokens_used} of {row.token_budget} tokens used"
    if new is None:
        return None
    done: Any = s.execute(sa.update(GoalRow).where(GoalRow.id == row.id, GoalRow.status == "active")
                          .values(status=new, reason=reason))
    if not done.rowcount:
        return None  # paused or cancelled meanwhile
    add_event(s, agent, "goal", "runtime", goal=row.id, io=io, **{"from": "active", "to": new})
    s.refresh(row)
    return new
