"""The console's agent-runtime pages (docs/service/console.md#agent-trees): the registered roots with
their spend today, and one tree — root and children by depth, each agent's lifecycle and tokens today,
each handle's status — with the tree's spend today against its caps (tokens, USD, turns, spawns,
messages). Read-only, scope ``viewer``; only agents inside the token's prefix are listed or shown.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from rsi_common.boundary import check_id
from rsi_common.db.runtime_models import AgentRuntimeRow, SubagentRow
from rsi_common.runtime.caps import resolve_caps
from rsi_common.runtime.spend import agent_totals, db_day, tree_totals
from rsi_common.runtime.subagents import LIVE
from rsi_common.runtime.tree import descendants, get_runtime
from rsi_worker.service.console.routes import _ctx, _guard, _page, _principal
from rsi_worker.service.state import ServiceState

__all__ = ["SPEND_DIMS", "roots_view", "router", "tree_view"]

router = APIRouter(prefix="/console", include_in_schema=False)
SPEND_DIMS: tuple[str, ...] = ("tokens", "usd", "turns", "spawns", "messages")
"""The tree-wide dimensions shown against their caps (``agent_tokens`` is shown per agent)."""
ROOTS_LISTED = 200


def _row(dim: str, spent: float, cap: float | None) -> dict[str, Any]:
    pct = None if not cap else min(100.0, 100.0 * spent / cap)
    shown = f"{spent:.4f}" if dim == "usd" else f"{int(spent):,}"
    cap_shown = "none" if cap is None else (f"{cap:.2f}" if dim == "usd" else f"{int(cap):,}")
    return {"dim": dim, "spent": shown, "cap": cap_shown, "pct": pct,
            "at_cap": cap is not None and spent >= cap}


def roots_view(s: Session, svc: ServiceState, prefix: str | None) -> list[dict[str, Any]]:
    """Registered roots (inside ``prefix``), by id, with their tree's size and spend today."""
    q = sa.select(AgentRuntimeRow).where(AgentRuntimeRow.parent_id.is_(None)).order_by(
        AgentRuntimeRow.agent_id)
    if prefix:
        q = q.where(AgentRuntimeRow.agent_id.startswith(prefix, autoescape=True))
    day = db_day(s)
    out = []
    for r in s.execute(q.limit(ROOTS_LISTED)).scalars():
        members = s.execute(sa.select(sa.func.count()).select_from(AgentRuntimeRow).where(
            AgentRuntimeRow.root_id == r.agent_id)).scalar_one()
        spent = tree_totals(s, r.agent_id, day)
        caps = resolve_caps(svc.settings.runtime, r.caps)
        out.append({"agent": r.agent_id, "lifecycle": r.lifecycle, "agents": members,
                    "tokens": _row("tokens", spent.tokens, caps.tokens), "usd": f"{spent.usd:.4f}",
                    "turns": spent.turns})
    return out


def tree_view(s: Session, svc: ServiceState, agent_id: str) -> dict[str, Any]:
    """The tree below ``agent_id`` as nested nodes, and its root's spend today against its caps.

    Raises:
        UnknownAgentError: the agent is not registered (404).
    """
    top = get_runtime(s, agent_id)
    rows = [top, *descendants(s, agent_id)]
    handles = list(s.execute(sa.select(SubagentRow).where(
        SubagentRow.parent_agent.in_([r.agent_id for r in rows])).order_by(
        SubagentRow.created_at, SubagentRow.id)).scalars())
    root = get_runtime(s, top.root_id)
    day = db_day(s)
    caps = resolve_caps(svc.settings.runtime, root.caps)
    spent = tree_totals(s, root.root_id, day)

    def node(r: AgentRuntimeRow) -> dict[str, Any]:
        tokens = agent_totals(s, r.agent_id, day)
        mine = [{"handle": h.id, "name": h.name, "spec": h.spec, "status": h.status,
                 "live": h.status in LIVE, "error": h.error, "child": h.child_agent}
                for h in handles if h.parent_agent == r.agent_id]
        return {"agent": r.agent_id, "lifecycle": r.lifecycle, "depth": r.depth, "spec": r.spec,
                "tokens": _row("agent_tokens", tokens, caps.agent_tokens), "handles": mine,
                "children": [node(c) for c in rows if c.parent_id == r.agent_id]}

    spend = [_row(d, getattr(spent, d), getattr(caps, d)) for d in SPEND_DIMS]
    live = sum(1 for h in handles if h.status in LIVE)
    return {"root": root.root_id, "agent": agent_id, "day": day, "tree": node(top), "spend": spend,
            "totals": asdict(spent), "agents": len(rows), "handles": len(handles), "live": live}


@router.get("/runtime")
@_guard
async def roots_page(request: Request) -> Response:
    svc, p, token = await _principal(request)

    def load() -> list[dict[str, Any]]:
        with svc.read() as s:
            return roots_view(s, svc, p.agent_prefix)

    return _page("runtime_roots.html", **_ctx(p, token, roots=await run_in_threadpool(load)))


@router.get("/runtime/{agent_id}")
@_guard
async def tree_page(request: Request, agent_id: str) -> Response:
    svc, p, token = await _principal(request)
    check_id(agent_id, "agent_id")
    p.check_agent(agent_id)

    def load() -> dict[str, Any]:
        with svc.read() as s:
            return tree_view(s, svc, agent_id)

    view = await run_in_threadpool(load)
    p.check_agent(view["root"])  # the root's spend is shown: it must be inside the prefix too
    return _page("runtime_tree.html", **_ctx(p, token, view=view, refresh_s=10))
