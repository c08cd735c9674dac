"""Request-level helpers of the API routers: the replica state, the caller, JSON bodies, audit.

``need(scope)`` is the one way a route admits a caller: a bearer token (401 without one), its rate
limit (429), the scope (403) — in that order. Agent-scoped routes then call
``principal.check_agent(agent_id)`` before anything is looked up (403 outside the token's prefix).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from rsi_common import db
from rsi_common.boundary import MAX_DEPTH, parse_json
from rsi_common.errors import InvalidInput
from rsi_common.stored import error_record
from rsi_worker.service.auth import Principal
from rsi_worker.service.middleware import body_limit
from rsi_worker.service.problems import Problem
from rsi_worker.service.state import ServiceState

__all__ = ["agent_arg", "audited", "bearer", "json_body", "need", "state"]

T = TypeVar("T")


def state(request: Request) -> ServiceState:
    """The replica's state."""
    svc: ServiceState = request.app.state.svc
    return svc


def bearer(request: Request) -> str | None:
    """The bearer token of the request, if any."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def need(scope: str | None) -> Callable[[Request], Coroutine[Any, Any, Principal]]:
    """A dependency admitting callers whose token holds ``scope`` (``None``: any valid token)."""

    async def dependency(request: Request) -> Principal:
        svc = state(request)
        principal = await run_in_threadpool(svc.auth.verify, bearer(request))
        await run_in_threadpool(svc.auth.admit, principal)
        svc.metrics.set_limit_errors(svc.auth.limiter.errors)
        if scope is not None:
            principal.require(scope)
        request.state.principal = principal
        return principal

    return dependency


async def json_body(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, parsed at the input boundary (size, UTF-8, depth: the body is
    level 1, so a world inside a turn may nest :data:`MAX_DEPTH` levels).

    Raises:
        Problem: 415 for a body that is not ``application/json``; 400 for malformed JSON or a body that is
            not an object.
    """
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise Problem(415, "unsupported-media-type", "send the body as application/json")
    raw = await request.body()
    limit = body_limit(request.method, request.url.path, state(request).settings.api_max_body_bytes)
    try:
        value = parse_json(raw or b"{}", "body", max_bytes=limit, max_depth=MAX_DEPTH + 1)
    except InvalidInput as exc:
        raise Problem(400, "malformed-body", str(exc)) from None
    if not isinstance(value, dict):
        raise Problem(400, "malformed-body", f"body: must be a JSON object, got {type(value).__name__}")
    return value


def audited(
    svc: ServiceState,
    principal: Principal,
    action: str,
    agent_id: str | None,
    target: str | None,
    act: Callable[[], T],
    *,
    ok_row: bool = True,
) -> T:
    """Run an operator or admin action and append its audit row (``ok``, ``refused`` for invalid input,
    ``failed`` for anything else) in a transaction of its own, then return or re-raise.

    The ``ok`` row is written after the action (a replica that dies between the two loses it); version
    moves write theirs inside the action's own transaction and pass ``ok_row=False``."""
    try:
        result = act()
    except (InvalidInput, Problem) as exc:
        _audit(svc, principal, action, agent_id, target, "refused", dict(error_record(exc)))
        raise
    except Exception as exc:
        _audit(svc, principal, action, agent_id, target, "failed", dict(error_record(exc)))
        raise
    if ok_row:
        _audit(svc, principal, action, agent_id, target, "ok", None)
    return result


def _audit(
    svc: ServiceState,
    p: Principal,
    action: str,
    agent_id: str | None,
    target: str | None,
    outcome: str,
    detail: dict[str, Any] | None,
) -> None:
    from rsi_common.stored import safe_text

    with svc.sessions.begin() as s:
        db.add_audit(
            s,
            action=action,
            outcome=outcome,
            token_id=p.token_id,
            token_name=p.name,
            agent_id=agent_id,
            target=safe_text(target, 300) if target else None,
            detail=detail,
        )


def agent_arg(principal: Principal, agent_id: str) -> str:
    """The path's agent id: the id grammar first (422), then the token's prefix (403)."""
    from rsi_common.boundary import check_id

    check_id(agent_id, "agent_id")
    principal.check_agent(agent_id)
    return agent_id
