"""Read endpoints (scope ``viewer``): agents, one agent, lineage, runs, one run with its full record,
run progress (also as an event stream), the diff of two versions, the regression set, spend, the
cluster and the audit log (docs/service/api.md, *Read endpoints*)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from rsi_common import db
from rsi_common.boundary import check_label
from rsi_common.coord import spend_key
from rsi_worker.service import views
from rsi_worker.service.auth import Principal
from rsi_worker.service.cluster import cluster_view
from rsi_worker.service.deps import agent_arg, need, state
from rsi_worker.service.events import sse
from rsi_worker.service.problems import Problem
from rsi_worker.service.schemas import AgentOut, AgentsOut, ProgressOut
from rsi_worker.service.state import ServiceState

__all__ = ["router", "run_for", "spend_today"]

router = APIRouter(prefix="/v1", tags=["read"])
VIEWER = Depends(need("viewer"))
OPERATOR = Depends(need("operator"))
PROGRESS_POLL_S = 0.5


def spend_today(svc: ServiceState, agent_ids: list[str]) -> dict[str, int]:
    """Consolidation tokens per agent today (UTC) from the spend counters; ``{}`` when Redis fails."""
    if not agent_ids:
        return {}
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    try:
        values = svc.redis.mget([spend_key(day, a) for a in agent_ids])
    except Exception:  # the counters are a display: never fail a page for them
        return {}
    return {a: int(v) if v is not None else 0 for a, v in zip(agent_ids, values, strict=True)}


@router.get("/agents", response_model=AgentsOut, summary="Agents (paged, filtered)")
def list_agents(
    request: Request,
    q: str | None = Query(None, max_length=128, description="id contains"),
    status: str | None = Query(None, pattern="^(idle|running|frozen|pinned)$"),
    limit: int = Query(50, ge=1, le=500),
    cursor: str | None = Query(None, max_length=128),
    p: Principal = VIEWER,
) -> dict[str, Any]:
    """Agents in id order, only those inside the token's prefix."""
    svc = state(request)
    with svc.read() as s:
        agents, nxt = views.agent_summaries(
            s, prefix=p.agent_prefix, q=q, status=status, limit=limit, after=cursor
        )
    spend = spend_today(svc, [a["agent_id"] for a in agents])
    for a in agents:
        a["spend_today_tokens"] = spend.get(a["agent_id"])
    return {"agents": agents, "next_cursor": nxt}


@router.get("/agents/{agent_id}", response_model=AgentOut, summary="One agent")
def get_agent(agent_id: str, request: Request, p: Principal = VIEWER) -> dict[str, Any]:
    agent_arg(p, agent_id)
    svc = state(request)
    with svc.read() as s:
        out = views.agent_summary(s, agent_id)
    out["spend_today_tokens"] = spend_today(svc, [agent_id]).get(agent_id)
    return out


@router.get("/agents/{agent_id}/lineage", summary="Versions and operator moves, oldest first")
def lineage(agent_id: str, request: Request, p: Principal = VIEWER) -> dict[str, Any]:
    """Every stored version (parent, run, lessons) and the timeline with rollbacks and pins."""
    agent_arg(p, agent_id)
    svc = state(request)
    versions = [dataclasses.asdict(v) for v in svc.client.lineage(agent_id)]
    for v in versions:
        v["created_at"] = v["created_at"].isoformat()
    with svc.read() as s:
        timeline = views.lineage_timeline(s, agent_id)
    return {"agent_id": agent_id, "versions": versions, "timeline": timeline}


@router.get("/agents/{agent_id}/runs", summary="The agent's runs, newest first")
def runs(
    agent_id: str,
    request: Request,
    limit: int = Query(50, ge=1, le=1000),
    before: str | None = Query(None, max_length=64, description="a run id: older runs only"),
    p: Principal = VIEWER,
) -> dict[str, Any]:
    agent_arg(p, agent_id)
    svc = state(request)
    with svc.read() as s:
        db.get_agent(s, agent_id)
        rows = views.runs_page(s, agent_id, limit=limit, before=before)
        return {"agent_id": agent_id, "runs": [views.run_dict(r) for r in rows]}


def run_for(svc: ServiceState, p: Principal, run_id: str) -> dict[str, Any]:
    """The run's full record (404 when absent, 403 outside the token's prefix)."""
    check_label(run_id, "run_id", max_chars=64)
    with svc.read() as s:
        record = views.run_record(s, run_id)
    if record is None:
        raise Problem(404, "unknown-run", "no such run")
    if not p.sees(record["agent_id"]):
        raise Problem(403, "outside-tenant", "the run's agent is outside this token's agent-id prefix")
    return record


@router.get("/runs/{run_id}", summary="One run with its full record")
def get_run(run_id: str, request: Request, p: Principal = VIEWER) -> dict[str, Any]:
    """Round parameters (lease token removed), drafts, result (δ, S★, candidates, usage, spend) and
    the trial matrix (worlds × candidates × trials)."""
    return run_for(state(request), p, run_id)


def _progress(svc: ServiceState, p: Principal, run_id: str) -> dict[str, Any]:
    check_label(run_id, "run_id", max_chars=64)
    with svc.read() as s:
        row = s.get(db.RunRow, run_id)
        if row is None:
            raise Problem(404, "unknown-run", "no such run")
        if not p.sees(row.agent_id):
            raise Problem(403, "outside-tenant", "the run's agent is outside this token's agent-id prefix")
    return dataclasses.asdict(svc.client.progress(run_id))


@router.get("/runs/{run_id}/progress", response_model=ProgressOut, summary="Where a run is")
def progress(run_id: str, request: Request, p: Principal = VIEWER) -> dict[str, Any]:
    return _progress(state(request), p, run_id)


@router.get(
    "/runs/{run_id}/progress/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
    summary="Run progress (server-sent events)",
)
async def progress_events(run_id: str, request: Request, p: Principal = VIEWER) -> StreamingResponse:
    """``event: progress`` whenever the phase or the trial count changes, then ``event: done`` with the
    final status; the stream ends with the run."""
    svc = state(request)
    first = await run_in_threadpool(_progress, svc, p, run_id)

    async def body() -> AsyncIterator[bytes]:
        last = first
        yield sse("progress", first)
        while last["status"] == "running" and not svc.hub.stopping:
            await asyncio.sleep(PROGRESS_POLL_S)
            now = await run_in_threadpool(_progress, svc, p, run_id)
            if now != last:
                yield sse("progress", now)
            last = now
        yield sse("done", {"run_id": run_id, "status": last["status"]})

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.get(
    "/agents/{agent_id}/diff",
    response_class=PlainTextResponse,
    summary="Diff of two versions",
    responses={200: {"content": {"text/x-diff": {}}}},
)
def diff(
    agent_id: str,
    request: Request,
    v1: str = Query("h0", max_length=100),
    v2: str = Query(..., max_length=100),
    p: Principal = VIEWER,
) -> PlainTextResponse:
    """Unified diff of the two versions' workspaces (``h0`` names the starting harness)."""
    agent_arg(p, agent_id)
    text = state(request).client.diff(agent_id, None if v1 == "h0" else v1, None if v2 == "h0" else v2)
    return PlainTextResponse(text, media_type="text/x-diff; charset=utf-8")


@router.get("/agents/{agent_id}/regressions", summary="The regression set")
def regressions(agent_id: str, request: Request, p: Principal = VIEWER) -> dict[str, Any]:
    """Every lesson (no world copies); ``active`` ones are replayed in every later round."""
    agent_arg(p, agent_id)
    svc = state(request)
    with svc.read() as s:
        agent = db.get_agent(s, agent_id)
        return {"agent_id": agent_id, "lessons": views.regression_set(s, agent_id, agent.current_version)}


@router.get("/agents/{agent_id}/spend", summary="Consolidation spend")
def spend(agent_id: str, request: Request, p: Principal = VIEWER) -> dict[str, Any]:
    """Today's tokens (UTC, the spend-cap counters) and the tokens of the stored runs."""
    agent_arg(p, agent_id)
    svc = state(request)
    with svc.read() as s:
        db.get_agent(s, agent_id)
        series = views.run_series(s, agent_id)
    return {
        "agent_id": agent_id,
        "today_tokens": spend_today(svc, [agent_id]).get(agent_id),
        "daily_cap_tokens": svc.settings.consolidation.agent_daily_tokens,
        "stored_runs": len(series),
        "stored_runs_tokens": sum(r["tokens"] for r in series),
    }


@router.get("/cluster", summary="Queues, workers, runs in flight, recent failures")
def cluster(request: Request, p: Principal = VIEWER) -> dict[str, Any]:
    return cluster_view(state(request), p.agent_prefix)


@router.get("/audit", summary="Operator actions, newest first (scope operator)")
def audit(
    request: Request,
    agent_id: str | None = Query(None, max_length=128),
    limit: int = Query(100, ge=1, le=1000),
    before: int | None = Query(None, ge=1),
    p: Principal = OPERATOR,
) -> dict[str, Any]:
    if agent_id is not None:
        agent_arg(p, agent_id)
    with state(request).read() as s:
        rows = db.audit_log(s, agent_id=agent_id, agent_prefix=p.agent_prefix, limit=limit, before_id=before)
    return {"entries": views.audit_dicts(rows)}
