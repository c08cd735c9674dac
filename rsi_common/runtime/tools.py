"""The runtime tools a registered agent's turn is offered (docs/runtime/subagents.md#runtime-tools).

Host tools of family ``rsi.runtime`` returning canonical JSON. A refusal is ``{"error": code,
"detail"}`` with ``is_error`` and the turn continues. Each tool writes in its own transaction (a
spawn or a send is durable before the model sees its result; a retried call with the same
``tool_use_id`` returns the first result). ``subagent_wait`` of a cluster turn returns at once when
its wait is met and otherwise raises :class:`~rsi_common.kernel.types.TurnYield`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.config import RuntimeParams
from rsi_common.db.runtime_models import SubagentRow
from rsi_common.kernel.runner import CURRENT_TOOL_USE_ID
from rsi_common.kernel.types import ToolDef, ToolResult, TurnYield
from rsi_common.runtime.budget import Budget
from rsi_common.runtime.caps import Caps
from rsi_common.runtime.goals import goal_tools, goal_tools_of
from rsi_common.runtime.messages import Mailbox, Sender, claim, render, send
from rsi_common.runtime.refine_tool import refine_tools
from rsi_common.runtime.subagents import (
    SETTLED,
    RuntimeRefusal,
    SpawnRequest,
    SpecEntry,
    after_settle,
    cancel,
    item,
    poll,
    spawn,
)
from rsi_common.runtime.toolsets import toolset_tools

__all__ = ["FAMILY", "ToolContext", "runtime_tools", "wait_result"]

FAMILY = "rsi.runtime"


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class ToolContext:
    """What the runtime tools of one turn slice share."""

    factory: sessionmaker[Session]
    redis: Any
    params: RuntimeParams
    caps: Caps
    agent: str
    session: str
    logical_io: str
    """``{session}:{n}``: the io of the logical turn (slice suffix removed)."""
    depth: int
    catalog: Mapping[str, SpecEntry] | None
    grant: tuple[str, ...]
    hops_in: int
    version: str | None
    messages: bool
    current_tool_id: str = ""
    spawned: list[str] = field(default_factory=list)
    """Handles this slice created (their children are woken after the slice)."""
    mailboxes: list[Mailbox] = field(default_factory=list)
    """Mailboxes this slice wrote to (woken after the slice)."""
    claimed: list[str] = field(default_factory=list)
    """Messages claimed mid-turn by ``message_receive`` (consumed by the commit)."""
    budget_left: Callable[[], dict[str, Any]] = lambda: {}
    check_factory: str | None = None
    """``RSI_CHECK_FACTORY`` (the goal's check runs in ``goal_complete``)."""
    refine: bool = False
    """The profile allows ``refine_request`` (:mod:`~rsi_common.runtime.refine_tool`)."""
    goal_read: bool = False
    """The turn read the agent's active goal when it loaded: :attr:`goal_id` is it (no second read)."""
    goal_id: str | None = None
    """The active goal's id when :attr:`goal_read` (``None``: no active goal)."""
    refines: list[Any] = field(default_factory=list)
    """Refine requests this slice accepted (started after its commit)."""


_S = {"type": "string"}


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


def _refusal(exc: RuntimeRefusal) -> ToolResult:
    return ToolResult(_json({"error": exc.code, "detail": exc.detail}), is_error=True)


def wait_result(factory: sessionmaker[Session], agent: str, session: str, handles: list[str]
                ) -> tuple[dict[str, Any], bool, bool]:
    """``({results, pending}, all_settled, any_settled)`` of a wait on ``handles`` (owned only)."""
    with factory() as s:
        rows = [poll(s, agent, session, h) for h in handles]
        results = [item(r) for r in rows if r.status in SETTLED]
        pending = [r.id for r in rows if r.status not in SETTLED]
    return {"results": results, "pending": pending}, not pending, bool(results)


def runtime_tools(ctx: ToolContext) -> list[ToolDef]:
    """The runtime tools offered to this turn: the ``subagent_*`` tools when a catalog is enabled and
    depth < ``MAX_DEPTH``, the message tools when the profile allows them, ``goal_get`` and
    ``goal_complete`` while a goal is active (docs/runtime/goals.md#goals), ``budget_get`` always."""
    tools: list[ToolDef] = []

    def guarded(fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        def run(args: dict[str, Any]) -> Any:
            try:
                return fn(args)
            except RuntimeRefusal as exc:
                return _refusal(exc)
        return run

    def tool_id(args: dict[str, Any]) -> str:
        return CURRENT_TOOL_USE_ID.get() or ctx.current_tool_id

    if ctx.catalog is not None and ctx.depth < ctx.params.max_depth:
        def do_spawn(args: dict[str, Any]) -> Any:
            req = SpawnRequest(ctx.agent, ctx.session, ctx.logical_io, tool_id(args),
                               str(args.get("spec", "")), args.get("input", ""), args.get("name"),
                               ctx.version)
            with ctx.factory.begin() as s:
                row, created = spawn(s, ctx.params, ctx.caps, req, ctx.catalog, ctx.grant,
                                     budget=Budget(ctx.redis, ctx.factory))
                out = {"handle": row.id, "name": row.name, "spec": row.spec, "agent": row.child_agent,
                       "status": row.status}
            if created:
                ctx.spawned.append(row.id)
            return _json(out)

        def do_wait(args: dict[str, Any]) -> Any:
            handles = args.get("handles")
            if not isinstance(handles, list) or not handles or not all(isinstance(h, str) for h in handles):
                raise RuntimeRefusal("bad_input", "handles must be a non-empty list of handles")
            mode = args.get("mode", "all")
            if mode not in ("all", "any"):
                raise RuntimeRefusal("bad_input", "mode must be 'all' or 'any'")
            timeout = args.get("timeout_s", ctx.params.wait_cap_s)
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
                raise RuntimeRefusal("bad_input", "timeout_s must be a number >= 0")
            out, done_all, done_any = wait_result(ctx.factory, ctx.agent, ctx.session, handles)
            if done_all or (mode == "any" and done_any) or timeout == 0:
                return _json(out)
            raise TurnYield({"handles": handles, "mode": mode,
                             "timeout_s": min(float(timeout), float(ctx.params.wait_cap_s))})

        def do_poll(args: dict[str, Any]) -> Any:
            with ctx.factory() as s:
                return _json(item(poll(s, ctx.agent, ctx.session, str(args.get("handle", "")))))

        def do_cancel(args: dict[str, Any]) -> Any:
            with ctx.factory.begin() as s:
                poll(s, ctx.agent, ctx.session, str(args.get("handle", "")))
                reason = str(args.get("reason", "parent"))[:100]
                done = cancel(s, str(args["handle"]), reason, actor=ctx.agent)
            after_settle(ctx.redis, done, cancelled=True, ttl_s=ctx.params.child_timeout_s)
            return _json({"ok": True})

        specs = ", ".join(sorted(ctx.catalog))
        tools += [
            ToolDef("subagent_spawn", f"Start a sub-agent from a catalog spec ({specs}).",
                    _schema({"spec": _S, "input": _S, "name": _S}, ["spec", "input"]),
                    family=FAMILY, executor=guarded(do_spawn)),
            ToolDef("subagent_wait", "Wait for sub-agents to finish; returns their answers.",
                    _schema({"handles": {"type": "array", "items": _S}, "timeout_s": {"type": "number"},
                             "mode": {"enum": ["all", "any"]}}, ["handles"]),
                    family=FAMILY, executor=guarded(do_wait)),
            ToolDef("subagent_poll", "A sub-agent's status and answer.",
                    _schema({"handle": _S}, ["handle"]),
                    family=FAMILY, read_only=True, executor=guarded(do_poll)),
            ToolDef("subagent_cancel", "Cancel a sub-agent and its descendants.",
                    _schema({"handle": _S, "reason": _S}, ["handle"]),
                    family=FAMILY, executor=guarded(do_cancel)),
        ]
    if ctx.messages:
        def do_send(args: dict[str, Any]) -> Any:
            sender = Sender(ctx.agent, ctx.session, ctx.logical_io, tool_id(args), ctx.hops_in, ctx.agent)
            with ctx.factory.begin() as s:
                receipts, boxes = send(s, ctx.redis, ctx.params, ctx.caps, sender, str(args.get("to", "")),
                                       args.get("text", ""))
            ctx.mailboxes += boxes
            return _json({"receipts": receipts})

        def do_receive(args: dict[str, Any]) -> Any:
            limit = args.get("max", 8)
            if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 8:
                raise RuntimeRefusal("bad_input", "max must be an integer from 1 to 8")
            with ctx.factory.begin() as s:
                rows = claim(s, ctx.agent, ctx.session, ctx.logical_io, limit=limit,
                             lease_s=3 * ctx.params.turn_lease_s)
                rows = [r for r in rows if r.id not in ctx.claimed]
                ctx.claimed += [r.id for r in rows]
                return _json({"messages": [render(r) for r in rows]})

        tools += [
            ToolDef("message_send", "Send a message to parent, child:<name>, sibling:<name> or all.",
                    _schema({"to": _S, "text": _S}, ["to", "text"]),
                    family=FAMILY, executor=guarded(do_send)),
            ToolDef("message_receive", "Read waiting messages.",
                    {"type": "object", "properties": {"max": {"type": "integer"}}}, family=FAMILY,
                    executor=guarded(do_receive)),
        ]
    if ctx.goal_read:
        tools += goal_tools_of(ctx.goal_id, ctx.factory, ctx.agent, ctx.session, ctx.check_factory)
    else:
        tools += goal_tools(ctx.factory, ctx.agent, ctx.session, ctx.check_factory)
    tools += refine_tools(ctx)
    tools.append(ToolDef("budget_get", "What remains of today's budget.", family=FAMILY, read_only=True,
                         executor=lambda _args: _json(ctx.budget_left())))
    tools += toolset_tools(ctx.grant)  # the profile's toolset, at_most_once calls journaled
    return tools


def live_children(factory: sessionmaker[Session], agent: str, session: str) -> int:
    """Unsettled handles of ``agent``'s ``session``."""
    with factory() as s:
        return int(s.execute(sa.select(sa.func.count()).select_from(SubagentRow).where(
            SubagentRow.parent_agent == agent, SubagentRow.parent_session == session,
            SubagentRow.status.notin_(SETTLED))).scalar_one())
