"""Operator endpoints (scope ``operator``): rollback, pin, freeze, unfreeze, clone, consolidate now; and
the admin endpoints (scope ``admin``) that manage tokens. Every call is audited — who, what, when and
how it ended — in ``rsi_audit`` (docs/service/access.md, *Audit*)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from rsi_common import db
from rsi_common.boundary import check_id
from rsi_common.client import AgentInfo
from rsi_common.errors import InvalidInput
from rsi_common.handoff import trigger_consolidation
from rsi_worker.service.auth import Principal
from rsi_worker.service.deps import agent_arg, audited, json_body, need, state
from rsi_worker.service.problems import Problem
from rsi_worker.service.schemas import TokenOut
from rsi_worker.service.state import ServiceState

__all__ = ["consolidate_now", "move", "router", "token_dict"]

router = APIRouter(prefix="/v1", tags=["operator"])
OPERATOR = Depends(need("operator"))
ADMIN = Depends(need("admin"))
_VERSION_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "version": {
                            "type": ["string", "null"],
                            "description": "a stored version id, or h0 / null",
                        }
                    },
                    "required": ["version"],
                }
            }
        },
    }
}


def _info(info: AgentInfo) -> dict[str, Any]:
    return dataclasses.asdict(info)


def _version(body: dict[str, Any]) -> str | None:
    if set(body) - {"version"}:
        raise InvalidInput("body: unknown key(s); known: version")
    if "version" not in body:
        raise InvalidInput('version: required (a stored version id, or "h0" / null for H0)')
    v = body["version"]
    if v is not None and not isinstance(v, str):
        raise InvalidInput(f"version: must be a string or null, got {type(v).__name__}")
    return None if v in (None, "h0") else v


def _moved(
    svc: ServiceState,
    p: Principal,
    action: str,
    agent_id: str,
    target: str | None,
    change: Callable[[Session], db.AgentRow],
) -> AgentInfo:
    """Apply a version move and its ``ok`` audit row in one transaction, then publish the change
    (the audit row is in SQL before any replica's event stream reads why the harness moved)."""
    with svc.sessions.begin() as s:
        info = AgentInfo.of(change(s))
        db.add_audit(
            s,
            action=action,
            outcome="ok",
            token_id=p.token_id,
            token_name=p.name,
            agent_id=agent_id,
            target=target,
        )
    svc.client._changed(agent_id)  # the client's own invalidation + publish on rsi:harness
    return info


def move(svc: ServiceState, p: Principal, action: str, agent_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Run one audited operator action on the agent (``rollback``/``pin`` take ``{"version"}``).

    A refused action (invalid input, unknown version) is audited ``refused`` in a transaction of its own.
    """
    if action in ("rollback", "pin"):
        version = audited(svc, p, action, agent_id, None, lambda: _version(body), ok_row=False)
        checked = audited(
            svc, p, action, agent_id, version or "h0", lambda: _checked_version(version), ok_row=False
        )
        fn = db.rollback_to if action == "rollback" else db.pin
        return _info(
            audited(
                svc,
                p,
                action,
                agent_id,
                checked or "h0",
                lambda: _moved(svc, p, action, agent_id, checked or "h0", lambda s: fn(s, agent_id, checked)),
                ok_row=False,
            )
        )
    if body:
        audited(svc, p, action, agent_id, None, lambda: _no_body(action), ok_row=False)
    fn2 = db.freeze if action == "freeze" else db.unfreeze
    return _info(
        audited(
            svc,
            p,
            action,
            agent_id,
            None,
            lambda: _moved(svc, p, action, agent_id, None, lambda s: fn2(s, agent_id)),
            ok_row=False,
        )
    )


def _no_body(action: str) -> None:
    raise InvalidInput(f"body: {action} takes no fields")


def _checked_version(version: str | None) -> str | None:
    from rsi_common.boundary import MAX_HARNESS_VERSION_CHARS, check_label

    return None if version is None else check_label(version, "version", max_chars=MAX_HARNESS_VERSION_CHARS)


def _action(action: str) -> Any:
    async def handler(agent_id: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
        agent_arg(p, agent_id)
        body = await json_body(request)
        return await run_in_threadpool(move, state(request), p, action, agent_id, body)

    handler.__name__ = f"{action}_agent"
    handler.__doc__ = {
        "rollback": "Make a stored version (or h0) current from the agent's next turn; a run going "
        "meanwhile will not adopt.",
        "pin": "Like rollback, and freeze the agent.",
        "freeze": "Stop consolidating the agent (its turns are still recorded).",
        "unfreeze": "Resume consolidating the agent.",
    }[action]
    return handler


for _name in ("rollback", "pin", "freeze", "unfreeze"):
    router.post(
        f"/agents/{{agent_id}}/{_name}",
        summary=_name.capitalize(),
        openapi_extra=_VERSION_BODY if _name in ("rollback", "pin") else None,
    )(_action(_name))


@router.post("/agents/{agent_id}/clone", summary="Clone the agent's lineage onto another agent")
async def clone(agent_id: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    """Body ``{"new_agent_id"}`` (inside the token's prefix too): the target gets the source's versions,
    current version and lessons."""
    agent_arg(p, agent_id)
    body = await json_body(request)
    target = body.get("new_agent_id")
    if set(body) - {"new_agent_id"} or not isinstance(target, str):
        raise InvalidInput('body: give exactly {"new_agent_id": <agent id>}')
    agent_arg(p, target)
    svc = state(request)
    info = await run_in_threadpool(
        lambda: audited(
            svc,
            p,
            "clone",
            agent_id,
            target,
            lambda: _moved(svc, p, "clone", target, agent_id, lambda s: db.clone_agent(s, agent_id, target)),
            ok_row=False,
        )
    )
    return _info(info)


def consolidate_now(svc: ServiceState, agent_id: str) -> dict[str, Any]:
    """Trigger a consolidation of the agent's newest turn, as a recorded turn would.

    Raises:
        Problem: 409 when the agent is frozen or has no stored turn.
    """
    with svc.read() as s:
        agent = db.get_agent(s, agent_id)
        io = s.execute(
            sa.select(db.WorldRow.io_id)
            .where(db.WorldRow.agent_id == agent_id)
            .order_by(db.WorldRow.clock.desc(), db.WorldRow.seq.desc())
            .limit(1)
        ).scalar()
    if agent.frozen:
        raise Problem(409, "agent-frozen", "the agent is frozen: unfreeze it first")
    if io is None:
        raise Problem(409, "no-turns", "the agent has no stored turn to consolidate")
    hand = trigger_consolidation(svc.client.coord, svc.client.dispatcher, agent_id, io)
    return {"agent_id": agent_id, "io_id": io, "dispatched": hand.outcome, "task_id": hand.task_id}


@router.post("/agents/{agent_id}/consolidate", summary="Consolidate now")
async def consolidate(agent_id: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    """Trigger a run for the newest turn (``enqueued``, or ``pending`` while one runs; ``deferred``
    when the broker is down)."""
    agent_arg(p, agent_id)
    await json_body(request)
    svc = state(request)
    out: dict[str, Any] = await run_in_threadpool(
        audited, svc, p, "consolidate", agent_id, None, lambda: consolidate_now(svc, agent_id)
    )
    return out


# --- tokens (admin) --------------------------------------------------------------------------------


def token_dict(row: db.TokenRow) -> dict[str, Any]:
    """A token row as listed (never the token)."""

    def iso(v: Any) -> str | None:
        return v.isoformat() if v is not None else None

    return {
        "id": row.id,
        "name": row.name,
        "scopes": list(row.scope_list),
        "agent_prefix": row.agent_prefix,
        "rate_per_min": row.rate_per_min,
        "created_by": row.created_by,
        "created_at": iso(row.created_at),
        "last_used_at": iso(row.last_used_at),
        "revoked_at": iso(row.revoked_at),
    }


@router.get("/tokens", response_model=list[TokenOut], tags=["admin"], summary="Tokens")
def list_tokens(request: Request, p: Principal = ADMIN) -> list[dict[str, Any]]:
    with state(request).read() as s:
        return [token_dict(r) for r in db.list_tokens(s, include_revoked=True)]


@router.post("/tokens", status_code=201, tags=["admin"], summary="Create a token (shown once)")
async def create_token(request: Request, p: Principal = ADMIN) -> dict[str, Any]:
    """Body ``{name, scopes, agent_prefix?, rate_per_min?}``; the answer holds ``token``, shown only now."""
    body = await json_body(request)
    known = {"name", "scopes", "agent_prefix", "rate_per_min"}
    if set(body) - known:
        raise InvalidInput(f"body: unknown key(s); known: {', '.join(sorted(known))}")
    scopes, name = body.get("scopes"), body.get("name")
    if not isinstance(name, str):
        raise InvalidInput("name: must be a string")
    if not isinstance(scopes, list):
        raise InvalidInput("scopes: must be a list of scopes")
    svc = state(request)

    def create() -> dict[str, Any]:
        with svc.sessions.begin() as s:
            issued = db.create_token(
                s,
                name,
                scopes,
                agent_prefix=body.get("agent_prefix"),
                rate_per_min=body.get("rate_per_min"),
                created_by=p.name,
            )
            return {**token_dict(issued.row), "token": issued.token}

    out: dict[str, Any] = await run_in_threadpool(audited, svc, p, "token.create", None, None, create)
    return out


@router.delete("/tokens/{token_id}", tags=["admin"], summary="Revoke a token")
def revoke_token(token_id: str, request: Request, p: Principal = ADMIN) -> dict[str, Any]:
    svc = state(request)
    check_id(token_id, "token_id", max_chars=32)

    def revoke() -> dict[str, Any]:
        with svc.sessions.begin() as s:
            return token_dict(db.revoke_token(s, token_id))

    out = audited(svc, p, "token.revoke", None, token_id, revoke)
    svc.auth.forget()
    return out
