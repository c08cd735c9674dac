"""The console's pages (docs/service/console.md): agents, one agent (timeline, plots, runs, regression set,
steering with confirmation), one run (round parameters, trial matrix, candidates, the winner's diff,
usage, live progress), the diff of two versions, the cluster and the audit log.

Every page needs the login cookie (``session``); without a valid one it redirects to the login page.
Every POST needs the session's CSRF value; without it the answer is 403 and nothing changes.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from rsi_common import db
from rsi_common.boundary import check_id
from rsi_common.errors import InvalidInput, UnknownAgentError
from rsi_worker.service import views
from rsi_worker.service.api_operator import consolidate_now, move
from rsi_worker.service.api_read import run_for, spend_today
from rsi_worker.service.auth import Principal
from rsi_worker.service.cluster import cluster_view
from rsi_worker.service.console import plots, session
from rsi_worker.service.deps import audited, state
from rsi_worker.service.problems import Problem
from rsi_worker.service.state import ServiceState

__all__ = ["RUNS_LISTED", "mount_static", "render_agent", "router"]

router = APIRouter(prefix="/console", include_in_schema=False)
HERE = Path(__file__).parent
RUNS_LISTED = 100
"""Newest runs listed in the agent page's table (the plots use every stored run)."""
_ACTIONS = ("rollback", "pin", "freeze", "unfreeze", "consolidate")


def _short(v: Any) -> str:
    if v is None:
        return "h0"
    text = str(v)
    return text.partition(":")[2][:12] if text.startswith("sha256:") else text


def _when(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, str):
        try:
            v = datetime.fromisoformat(v)
        except ValueError:
            return str(v)
    return str(v.strftime("%Y-%m-%d %H:%M:%S UTC"))


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]), auto_reload=False
    )
    env.filters["short"] = _short
    env.filters["when"] = _when
    return env


_ENV = _environment()


def mount_static(app: FastAPI) -> None:
    """Serve the stylesheet from the package (no CDN)."""
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")


def _page(name: str, http_status: int = 200, **ctx: Any) -> HTMLResponse:
    return _html(str(_ENV.get_template(name).render(**ctx)), http_status)


def _html(html: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        html,
        status_code=status,
        headers={
            "Cache-Control": "no-store",
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "same-origin",
            "Content-Security-Policy": "default-src 'none'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        },
    )


class _Login(Exception):
    pass


async def _principal(request: Request) -> tuple[ServiceState, Principal, str]:
    """The logged-in caller (viewer scope), its token and the replica state; redirects to login."""
    svc = state(request)
    token = request.cookies.get(session.COOKIE)
    if not token:
        raise _Login
    try:
        p = await run_in_threadpool(svc.auth.verify, token)
    except Problem:
        raise _Login from None
    await run_in_threadpool(svc.auth.admit, p)
    p.require("viewer")
    request.state.principal = p
    return svc, p, token


def _ctx(p: Principal, token: str, **kw: Any) -> dict[str, Any]:
    return {"principal": p, "csrf": session.csrf_for(token), **kw}


async def _form(request: Request) -> dict[str, str]:
    raw = await request.body()
    try:
        return dict(
            parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=20)
        )
    except (UnicodeDecodeError, ValueError):
        raise Problem(400, "malformed-form", "the form is not valid UTF-8 form data") from None


async def _posted(request: Request) -> tuple[ServiceState, Principal, str, dict[str, str]]:
    """A console POST: the logged-in caller as :func:`_principal` gives it and its form, refused
    (403) unless the form carries the session's CSRF value."""
    svc, p, token = await _principal(request)
    form = await _form(request)
    if not session.check_csrf(token, form.get("csrf")):
        raise Problem(403, "csrf", "missing or wrong CSRF value: the action was refused")
    return svc, p, token, form


def _error_page(exc: Problem | InvalidInput, p: Principal | None, token: str | None) -> HTMLResponse:
    status = exc.status if isinstance(exc, Problem) else (404 if isinstance(exc, UnknownAgentError) else 422)
    detail = exc.detail if isinstance(exc, Problem) else str(exc)
    ctx = _ctx(p, token) if p is not None and token else {}
    return _page(
        "error.html",
        http_status=status,
        status=status,
        title="refused" if status < 500 else "error",
        detail=detail,
        **ctx,
    )


def _guard(handler: Any) -> Any:
    """Wrap a page: redirect to login without a session; errors as an HTML page with their status."""
    import functools

    @functools.wraps(handler)
    async def wrapped(request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            return await handler(request, *args, **kwargs)  # type: ignore[no-any-return]
        except _Login:
            nxt = quote(request.url.path, safe="/")
            return RedirectResponse(f"/console/login?next={nxt}", status_code=303)
        except (Problem, InvalidInput) as exc:
            if isinstance(exc, Problem) and exc.status == 429:
                raise
            return _error_page(
                exc, getattr(request.state, "principal", None), request.cookies.get(session.COOKIE)
            )

    return wrapped


# --- login ---------------------------------------------------------------------------------------


@router.get("/login")
async def login_page(request: Request) -> Response:
    value, new = session.login_value(request)
    response = _page("login.html", login_csrf=value, principal=None, next=_next(request))
    if new:
        session.set_login_cookie(request, response, value)
    return response


def _next(request: Request) -> str:
    """Where to go after login: a console path of this site only (never another origin)."""
    nxt = request.query_params.get("next", "/console/")
    ok = nxt.startswith("/console/") and "//" not in nxt and "\\" not in nxt and nxt.isprintable()
    return nxt if ok else "/console/"


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    expected = request.cookies.get(session.LOGIN_COOKIE)
    if not session.check_login(expected, form.get("csrf")):
        return _page(
            "error.html",
            http_status=403,
            status=403,
            title="refused",
            principal=None,
            detail="the login form expired or came from another site; open the login page again",
        )
    svc = state(request)
    token = form.get("token", "").strip()
    try:
        p = await run_in_threadpool(svc.auth.verify, token)
        p.require("viewer")
    except Problem as exc:
        return _page(
            "login.html",
            http_status=401 if exc.status == 401 else 403,
            principal=None,
            error=f"login refused: {exc.detail}",
            login_csrf=expected,
            next=_next(request),
        )
    redirect = RedirectResponse(_next(request), status_code=303)
    session.set_session(request, redirect, token)
    return redirect


@router.post("/logout")
@_guard
async def logout(request: Request) -> Response:
    await _posted(request)
    response = RedirectResponse("/console/login", status_code=303)
    session.clear_session(response)
    return response


# --- pages ---------------------------------------------------------------------------------------


@router.get("/")
@_guard
async def agents_page(request: Request) -> Response:
    svc, p, token = await _principal(request)
    qp = request.query_params
    q, status, cursor = qp.get("q") or None, qp.get("status") or None, qp.get("cursor") or None
    if q is not None and len(q) > 128:
        raise Problem(422, "invalid-input", "q: at most 128 characters")
    if status not in (None, *views.AGENT_STATUSES):
        raise Problem(422, "invalid-input", f"status: one of {', '.join(views.AGENT_STATUSES)}")

    def load() -> tuple[list[dict[str, Any]], str | None]:
        with svc.read() as s:
            agents, nxt = views.agent_summaries(
                s, prefix=p.agent_prefix, q=q, status=status, limit=50, after=cursor
            )
        spend = spend_today(svc, [a["agent_id"] for a in agents])
        for a in agents:
            a["spend_today_tokens"] = spend.get(a["agent_id"])
        return agents, nxt

    agents, nxt = await run_in_threadpool(load)
    return _page(
        "agents.html",
        **_ctx(
            p,
            token,
            agents=agents,
            next_cursor=nxt,
            q=q,
            status=status,
            statuses=views.AGENT_STATUSES,
            flash=qp.get("done"),
        ),
    )


def render_agent(svc: ServiceState, p: Principal, token: str, agent_id: str, flash: str | None = None) -> str:
    """The agent page's HTML (also timed by ``rsi bench api``)."""
    with svc.read() as s:
        summary = views.agent_summary(s, agent_id)
        series = views.run_series(s, agent_id)
        runs = views.runs_page(s, agent_id, limit=RUNS_LISTED)
        versions = db.lineage(s, agent_id)
        timeline = views.lineage_timeline(s, agent_id)
        lessons = views.regression_set(s, agent_id, summary["current_version"])
        audit = views.audit_dicts(db.audit_log(s, agent_id=agent_id, limit=20)) if p.has("operator") else []
    spend = {
        "today": spend_today(svc, [agent_id]).get(agent_id),
        "cap": svc.settings.consolidation.agent_daily_tokens,
        "stored": sum(r["tokens"] for r in series),
    }
    ctx = _ctx(
        p,
        token,
        agent=summary,
        series=series,
        runs=runs,
        versions=versions,
        timeline=timeline,
        lessons=lessons,
        audit=audit,
        spend=spend,
        more_runs=max(0, len(series) - len(runs)),
        score_svg=plots.score_chart(series),
        token_svg=plots.token_chart(series),
        flash=flash,
    )
    return str(_ENV.get_template("agent.html").render(**ctx))


@router.get("/agents/{agent_id}")
@_guard
async def agent_page(request: Request, agent_id: str) -> Response:
    svc, p, token = await _principal(request)
    check_id(agent_id, "agent_id")
    p.check_agent(agent_id)
    t0 = time.perf_counter()
    html = await run_in_threadpool(render_agent, svc, p, token, agent_id, request.query_params.get("done"))
    response = _html(html)
    response.headers["Server-Timing"] = f"render;dur={(time.perf_counter() - t0) * 1000:.1f}"
    return response


_QUESTIONS = {
    "rollback": "Make {version} the agent's harness from its next turn? "
    "A consolidation running now will not adopt.",
    "pin": "Make {version} the agent's harness and freeze the agent (no further consolidation)?",
    "freeze": "Stop consolidating this agent? Its turns are still recorded.",
    "unfreeze": "Resume consolidating this agent from its next turn?",
    "consolidate": "Start a consolidation of the agent's newest turn now?",
}


@router.get("/agents/{agent_id}/confirm")
@_guard
async def confirm_page(request: Request, agent_id: str) -> Response:
    _svc, p, token = await _principal(request)
    check_id(agent_id, "agent_id")
    p.check_agent(agent_id)
    p.require("operator")
    action = request.query_params.get("action", "")
    if action not in _ACTIONS:
        raise Problem(422, "invalid-input", f"action: one of {', '.join(_ACTIONS)}")
    version = request.query_params.get("version") if action in ("rollback", "pin") else None
    if action in ("rollback", "pin") and not version:
        raise Problem(422, "invalid-input", "version: choose a version")
    question = _QUESTIONS[action].format(version=_short(None if version == "h0" else version))
    return _page(
        "confirm.html", **_ctx(p, token, agent_id=agent_id, action=action, version=version, question=question)
    )


@router.post("/agents/{agent_id}/{action}")
@_guard
async def act(request: Request, agent_id: str, action: str) -> Response:
    svc, p, _token, form = await _posted(request)
    check_id(agent_id, "agent_id")
    p.check_agent(agent_id)
    p.require("operator")
    if action not in _ACTIONS:
        raise Problem(404, "not-found", "no such action")
    if action == "consolidate":
        out = await run_in_threadpool(
            audited, svc, p, "consolidate", agent_id, None, lambda: consolidate_now(svc, agent_id)
        )
        done = f"consolidation {out['dispatched']}"
    else:
        body = {"version": form.get("version")} if action in ("rollback", "pin") else {}
        info = await run_in_threadpool(move, svc, p, action, agent_id, body)
        done = f"{action} done: current version {_short(info['current_version'])}"
    return RedirectResponse(f"/console/agents/{quote(agent_id, safe='')}?done={quote(done)}", status_code=303)


@router.get("/runs/{run_id}")
@_guard
async def run_page(request: Request, run_id: str) -> Response:
    svc, p, token = await _principal(request)
    run = await run_in_threadpool(run_for, svc, p, run_id)
    result = run.get("result") or {}
    rnd = result.get("round") or (run.get("params") or {}).get("round") or {}
    diff = None
    if run.get("adopted_version"):
        diff = await run_in_threadpool(
            svc.client.diff, run["agent_id"], run.get("start_version"), run["adopted_version"]
        )
    progress, refresh = None, None
    if run["status"] == "running":
        import dataclasses

        progress = dataclasses.asdict(await run_in_threadpool(svc.client.progress, run_id))
        refresh = 2
    return _page(
        "run.html",
        **_ctx(
            p,
            token,
            run=run,
            rnd=rnd,
            result=result,
            trials=run["trials"],
            diff=diff,
            progress=progress,
            refresh_s=refresh,
        ),
    )


@router.get("/agents/{agent_id}/diff")
@_guard
async def diff_page(request: Request, agent_id: str) -> Response:
    svc, p, token = await _principal(request)
    check_id(agent_id, "agent_id")
    p.check_agent(agent_id)
    v1, v2 = request.query_params.get("v1", "h0"), request.query_params.get("v2", "h0")
    versions = await run_in_threadpool(svc.client.lineage, agent_id)
    choices = ["h0", *[v.version for v in versions]]
    text = await run_in_threadpool(
        svc.client.diff, agent_id, None if v1 == "h0" else v1, None if v2 == "h0" else v2
    )
    return _page("diff.html", **_ctx(p, token, agent_id=agent_id, v1=v1, v2=v2, choices=choices, text=text))


@router.get("/cluster")
@_guard
async def cluster_page(request: Request) -> Response:
    svc, p, token = await _principal(request)
    view = await run_in_threadpool(cluster_view, svc, p.agent_prefix)
    return _page("cluster.html", **_ctx(p, token, view=view, refresh_s=5))


@router.get("/audit")
@_guard
async def audit_page(request: Request) -> Response:
    svc, p, token = await _principal(request)
    p.require("operator")

    def load() -> list[dict[str, Any]]:
        with svc.read() as s:
            return views.audit_dicts(db.audit_log(s, agent_prefix=p.agent_prefix, limit=200))

    entries = await run_in_threadpool(load)
    return _page("audit.html", **_ctx(p, token, entries=entries))
