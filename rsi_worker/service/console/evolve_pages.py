"""The console's evolve pages (docs/service/console.md#evolve-runs): the runs, newest first, and one run —
a chart over its rounds of S on the evolve and held-out splits and δ, the rounds table, the candidates
and outcomes, the frontier and its diff against H0; it refreshes every few seconds while the run runs.
Stop and promote go through a confirmation page (scope ``operator``, the session's CSRF value) and act
through :mod:`rsi_worker.service.api_evolve` (the same calls, audited, as the API's).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from rsi_common.boundary import check_id
from rsi_common.errors import InvalidInput
from rsi_worker.service.api_evolve import (
    NAME_CHARS,
    evolve_name,
    known_run,
    promote_run,
    promote_target,
    stop_run,
    store_of,
)
from rsi_worker.service.console import plots
from rsi_worker.service.console.routes import _ctx, _guard, _page, _posted, _principal, _short
from rsi_worker.service.evolve_view import frontier_diff, run_row, run_view
from rsi_worker.service.problems import Problem
from rsi_worker.service.state import ServiceState

__all__ = ["REFRESH_S", "RUNS_LISTED", "router"]

router = APIRouter(prefix="/console", include_in_schema=False)
RUNS_LISTED = 50
REFRESH_S = 3
"""Seconds between reloads of a running run's page (a ``<meta http-equiv="refresh">``)."""
_ACTIONS = ("stop", "promote")


def _url(name: str) -> str:
    return f"/console/evolve/{quote(name, safe='')}"


@router.get("/evolve")
@_guard
async def evolve_list(request: Request) -> Response:
    svc, p, token = await _principal(request)
    cursor = request.query_params.get("cursor") or None
    if cursor is not None:
        check_id(cursor, "cursor", max_chars=NAME_CHARS)
    rows, nxt = await run_in_threadpool(lambda: store_of(svc).runs_page(limit=RUNS_LISTED, after=cursor))
    runs = [run_row(r) for r in rows]
    return _page("evolve_list.html", **_ctx(p, token, runs=runs, next_cursor=nxt))


def _load(svc: ServiceState, name: str) -> tuple[dict[str, Any], str]:
    store = store_of(svc)
    known_run(store, name)
    return run_view(store, name), frontier_diff(store, name)


@router.get("/evolve/{name}")
@_guard
async def evolve_page(request: Request, name: str) -> Response:
    svc, p, token = await _principal(request)
    evolve_name(name)
    view, diff = await run_in_threadpool(_load, svc, name)
    return _page(
        "evolve_run.html",
        **_ctx(
            p,
            token,
            run=view,
            chart_svg=plots.evolve_chart(view),
            diff=diff,
            refresh_s=REFRESH_S if view["status"] == "running" else None,
            flash=request.query_params.get("done"),
        ),
    )


@router.get("/evolve/{name}/confirm")
@_guard
async def evolve_confirm(request: Request, name: str) -> Response:
    svc, p, token = await _principal(request)
    evolve_name(name)
    p.require("operator")
    action = request.query_params.get("action", "")
    if action not in _ACTIONS:
        raise Problem(422, "invalid-input", f"action: one of {', '.join(_ACTIONS)}")
    await run_in_threadpool(known_run, store_of(svc), name)
    fields: dict[str, str] = {}
    if action == "stop":
        question = f"Stop evolve run {name} after its current round?"
    else:
        agent = promote_target(p, {"agent_id": request.query_params.get("agent_id", "")})
        fields["agent_id"] = agent
        question = (
            f"Make the frontier of evolve run {name} the current version of agent {agent} "
            "(a fenced write with lineage, screened by the gate's import checks)?"
        )
    return _page(
        "confirm.html",
        **_ctx(
            p,
            token,
            action=action,
            subject=name,
            question=question,
            post_url=f"{_url(name)}/{action}",
            back_url=_url(name),
            fields=fields,
        ),
    )


@router.post("/evolve/{name}/{action}")
@_guard
async def evolve_act(request: Request, name: str, action: str) -> Response:
    svc, p, _token, form = await _posted(request)
    evolve_name(name)
    p.require("operator")
    if action not in _ACTIONS:
        raise Problem(404, "not-found", "no such action")
    if action == "stop":
        await run_in_threadpool(stop_run, svc, p, name)
        done = "stop requested: the run ends after its current round"
    else:
        if set(form) - {"csrf", "agent_id"}:
            raise InvalidInput("form: unknown field(s); known: agent_id")
        agent = promote_target(p, {"agent_id": form.get("agent_id", "")})
        out = await run_in_threadpool(promote_run, svc, p, name, agent)
        done = f"promoted: agent {agent} now runs {_short(out['version'])}"
    return RedirectResponse(f"{_url(name)}?done={quote(done)}", status_code=303)
