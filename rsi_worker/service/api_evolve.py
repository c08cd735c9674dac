"""Evolve runs over HTTP (docs/service/api.md#evolve-runs): list and read them (scope ``viewer``), stop
one or promote its frontier onto an agent (scope ``operator``, audited as ``evolve.stop`` /
``evolve.promote``). The actions are those of ``rsi evolve stop|promote``
(:func:`rsi_worker.evolve.ops.request_stop`, :func:`rsi_worker.evolve.ops.promote`).

Evolve runs are cluster-wide, not an agent's: every viewer lists them. A promotion's target agent is
checked against the token's agent-id prefix like any agent-scoped call.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from rsi_common.boundary import check_id
from rsi_common.credentials import find_credentials
from rsi_common.errors import AgentConflict, InvalidInput
from rsi_common.llm import ModelClient
from rsi_worker.evolve import ops
from rsi_worker.evolve.engine import EvolveEnv
from rsi_worker.evolve.store import Store
from rsi_worker.service.auth import Principal
from rsi_worker.service.deps import agent_arg, audited, json_body, need, state
from rsi_worker.service.evolve_view import run_row, run_view
from rsi_worker.service.problems import Problem
from rsi_worker.service.state import ServiceState

__all__ = [
    "NAME_CHARS",
    "evolve_name",
    "known_run",
    "promote_run",
    "promote_target",
    "router",
    "stop_run",
    "store_of",
]

router = APIRouter(prefix="/v1", tags=["evolve"])
VIEWER = Depends(need("viewer"))
OPERATOR = Depends(need("operator"))
NAME_CHARS = 64
"""An evolve run's name: the id grammar, at most its column's 64 characters (as ``rsi evolve init``)."""


def store_of(svc: ServiceState) -> Store:
    return Store(svc.sessions)


def evolve_name(name: str) -> str:
    """The path's run name: the id grammar, no credential shape (422, the value not shown)."""
    check_id(name, "name", max_chars=NAME_CHARS)
    if find_credentials(name):
        raise InvalidInput("name: looks like a credential; refused (the value is not shown)")
    return name


def known_run(store: Store, name: str) -> None:
    try:
        store.run_times(name)
    except InvalidInput:
        raise Problem(404, "unknown-evolve-run", "no such evolve run") from None


def _no_models(provider: str, model: str, role: str) -> ModelClient:
    raise InvalidInput("promote calls no model")


def promote_target(p: Principal, body: dict[str, Any]) -> str:
    """The promotion's agent: the only key, the id grammar, no credential shape, inside the prefix."""
    if set(body) - {"agent_id"}:
        raise InvalidInput('body: unknown key(s); give exactly {"agent_id": <agent id>}')
    agent = body.get("agent_id")
    if not isinstance(agent, str):
        raise InvalidInput("agent_id: required, a string agent id")
    if len(agent) <= 4096 and find_credentials(agent):
        raise InvalidInput("agent_id: looks like a credential; refused (the value is not shown)")
    return agent_arg(p, agent)


def stop_run(svc: ServiceState, p: Principal, name: str) -> dict[str, Any]:
    """``rsi evolve stop``, audited: the run ends after its current round."""
    store = store_of(svc)

    def act() -> dict[str, Any]:
        known_run(store, name)
        ops.request_stop(store, name)
        return {"name": name, "stop_requested": True, "status": store.run(name)[2]}

    return audited(svc, p, "evolve.stop", None, name, act)


def promote_run(svc: ServiceState, p: Principal, name: str, agent: str) -> dict[str, Any]:
    """``rsi evolve promote``, audited: the frontier becomes ``agent``'s current version (fenced write,
    lineage, the gate's import checks); a busy or frozen agent is refused with 409."""
    store = store_of(svc)
    env = EvolveEnv(svc.sessions, _no_models, svc.settings)

    def act() -> dict[str, Any]:
        known_run(store, name)
        try:
            out = ops.promote(env, svc.client.coord, name, agent, dispatcher=svc.client.dispatcher)
        except AgentConflict as exc:
            raise Problem(409, exc.slug, str(exc)) from None
        svc.client._changed(agent)  # invalidate and publish on rsi:harness, as a version move does
        return out

    return audited(svc, p, "evolve.promote", agent, name, act)


@router.get("/evolve", summary="Evolve runs, newest first (paged)")
def list_runs(
    request: Request,
    limit: int = Query(50, ge=1, le=500),
    cursor: str | None = Query(None, max_length=NAME_CHARS),
    p: Principal = VIEWER,
) -> dict[str, Any]:
    """Name, suite, status, rounds done of T, the frontier's S on the evolve and held-out splits, S★."""
    if cursor is not None:
        check_id(cursor, "cursor", max_chars=NAME_CHARS)
    rows, nxt = store_of(state(request)).runs_page(limit=limit, after=cursor)
    return {"runs": [run_row(r) for r in rows], "next_cursor": nxt}


@router.get("/evolve/{name}", summary="One evolve run")
def get_run(name: str, request: Request, p: Principal = VIEWER) -> dict[str, Any]:
    """Config, a row per judged round, the frontier, held-out S per adopted version, usage by role."""
    evolve_name(name)
    store = store_of(state(request))
    known_run(store, name)
    return run_view(store, name)


@router.post("/evolve/{name}/stop", summary="Stop an evolve run after its current round")
async def stop(name: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    evolve_name(name)
    body = await json_body(request)
    if body:
        raise InvalidInput("body: stop takes no fields")
    out: dict[str, Any] = await run_in_threadpool(stop_run, state(request), p, name)
    return out


@router.post("/evolve/{name}/promote", summary="Promote an evolve run's frontier onto an agent")
async def promote(name: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    """Body ``{"agent_id"}`` (inside the token's prefix): as ``rsi evolve promote NAME --agent A``."""
    evolve_name(name)
    agent = promote_target(p, await json_body(request))
    out: dict[str, Any] = await run_in_threadpool(promote_run, state(request), p, name, agent)
    return out
