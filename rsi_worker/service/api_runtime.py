"""The runtime's operator endpoints under ``/v1/runtime`` (docs/runtime/README.md#http-api): each is one
:class:`~rsi_common.runtime.host.RuntimeClient` call made as ``operator:<token name>``.

Reads (``tree``, ``spend``, ``poll``) need scope ``viewer``; everything that changes the runtime needs
``operator`` and is audited (``runtime.<method>``, ``ok``/``refused``/``failed``) like the other operator
actions. Every agent named — the path's, a message's recipient, a handle's parent — must be inside the
token's agent-id prefix (403 before anything is looked up). Bodies are JSON objects whose unknown keys
are refused; a refusal is a problem document: 422 naming the field (a runtime refusal's code first, e.g.
``cap_exceeded:spawns: …``), 404 for an unregistered agent or an unknown handle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from rsi_common.boundary import check_id
from rsi_common.db.runtime_models import SubagentRow
from rsi_common.errors import InvalidInput
from rsi_common.runtime.host import RuntimeClient
from rsi_worker.service.auth import Principal
from rsi_worker.service.deps import agent_arg, audited, json_body, need, state
from rsi_worker.service.problems import Problem

__all__ = ["router"]

router = APIRouter(prefix="/v1/runtime", tags=["runtime"])
VIEWER = Depends(need("viewer"))
OPERATOR = Depends(need("operator"))
_JSON = {"type": "object", "additionalProperties": True}


def _body(required: tuple[str, ...], **props: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` of a JSON body with ``props`` (unknown keys are refused)."""
    schema = {"type": "object", "properties": props, "required": list(required),
              "additionalProperties": False}
    return {"requestBody": {"required": bool(required),
                            "content": {"application/json": {"schema": schema}}}}


def _fields(body: dict[str, Any], required: tuple[str, ...],
            optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """The body's known fields (``None`` optional ones left out), or ``InvalidInput`` naming the key."""
    known = (*required, *optional)
    extra = sorted(set(body) - set(known))
    if extra:
        raise InvalidInput(f"body: unknown key {extra[0][:64]!r}; known: {', '.join(known)}")
    for key in required:
        if key not in body:
            raise InvalidInput(f"{key}: required")
    return {k: body[k] for k in known if k in required or (k in body and body[k] is not None)}


def _client(request: Request, p: Principal) -> RuntimeClient:
    return RuntimeClient(state(request).client, actor=f"operator:{p.name}"[:64])


async def _act(request: Request, p: Principal, method: str, agent_id: str | None, target: str | None,
               call: Callable[[RuntimeClient], Any]) -> Any:
    """Run one audited runtime call in the thread pool."""
    svc, rc = state(request), _client(request, p)
    return await run_in_threadpool(audited, svc, p, f"runtime.{method}", agent_id, target, lambda: call(rc))


def _handle_owner(request: Request, p: Principal, handle: str) -> None:
    """Refuse a handle whose parent is outside the token's prefix (404 for an unknown one)."""
    check_id(handle, "handle", max_chars=64)
    with state(request).read() as s:
        row = s.get(SubagentRow, handle)
        parent = None if row is None else row.parent_agent
    if parent is None:
        raise Problem(404, "unknown-handle", "no such handle")
    p.check_agent(parent)


# --- agents --------------------------------------------------------------------------------------


@router.post("/agents/{agent_id}", summary="Register (or update) a root agent",
             openapi_extra=_body(("profile",), profile=_JSON, caps=_JSON))
async def register(agent_id: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    """Body ``{profile, caps?}`` (docs/runtime/README.md#terms for the profile's keys)."""
    agent_arg(p, agent_id)
    f = _fields(await json_body(request), ("profile",), ("caps",))
    if not isinstance(f["profile"], dict):
        raise InvalidInput("profile: must be an object")
    out: dict[str, Any] = await _act(request, p, "register", agent_id, None,
                                     lambda rc: rc.register(agent_id, f["profile"], f.get("caps")))
    return out


@router.post("/agents/{agent_id}/turns", summary="Post a message to a session and wake its turn",
             openapi_extra=_body(("text",), text={"type": "string"}, session={"type": "string"}))
async def start_turn(agent_id: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    """Body ``{text, session?}``; the answer lists the message receipts."""
    agent_arg(p, agent_id)
    f = _fields(await json_body(request), ("text",), ("session",))
    receipts = await _act(request, p, "start_turn", agent_id, f.get("session"),
                          lambda rc: rc.start_turn(agent_id, f["text"], f.get("session", "main")))
    return {"receipts": receipts}


@router.post("/messages", summary="An operator's message to <agent> or <agent>@<session>",
             openapi_extra=_body(("to", "text"), to={"type": "string"}, text={"type": "string"}))
async def send(request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    """Body ``{to, text}``."""
    f = _fields(await json_body(request), ("to", "text"))
    if not isinstance(f["to"], str):
        raise InvalidInput("to: must be <agent> or <agent>@<session>")
    agent = agent_arg(p, f["to"].partition("@")[0])
    receipts = await _act(request, p, "send", agent, f["to"][:300], lambda rc: rc.send(f["to"], f["text"]))
    return {"receipts": receipts}


@router.get("/agents/{agent_id}/tree", summary="The agent, its descendants, handles and the tree's spend")
async def tree(agent_id: str, request: Request, p: Principal = VIEWER) -> dict[str, Any]:
    agent_arg(p, agent_id)
    rc = _client(request, p)
    out: dict[str, Any] = await run_in_threadpool(rc.tree, agent_id)
    return out


@router.get("/agents/{agent_id}/spend", summary="The day's spend of a tree (its root) or of one agent")
async def spend(agent_id: str, request: Request, day: str | None = None,
                p: Principal = VIEWER) -> dict[str, Any]:
    """``day`` is ``YYYY-MM-DD`` (default: today, UTC, the database's clock)."""
    agent_arg(p, agent_id)
    if day is not None:
        from datetime import date

        try:
            date.fromisoformat(day if len(day) == 10 else "x")
        except ValueError:
            raise InvalidInput("day: must be YYYY-MM-DD") from None
    rc = _client(request, p)
    out: dict[str, Any] = await run_in_threadpool(rc.spend, agent_id, day)
    return out


@router.post("/agents/{agent_id}/restore", summary="Return a failed agent to idle")
async def restore(agent_id: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    agent_arg(p, agent_id)
    await json_body(request)
    life = await _act(request, p, "restore", agent_id, None, lambda rc: rc.restore(agent_id))
    return {"agent": agent_id, "lifecycle": life}


@router.delete("/agents/{agent_id}", summary="Tombstone the agent and its descendants")
async def delete(agent_id: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    """Cancels the live handles of the agent and of every descendant (returned)."""
    agent_arg(p, agent_id)
    cancelled = await _act(request, p, "delete", agent_id, None, lambda rc: rc.delete(agent_id))
    return {"agent": agent_id, "lifecycle": "deleted", "cancelled": cancelled}


@router.put("/agents/{agent_id}/caps", summary="Override the daily caps of a root's tree",
            openapi_extra=_body(("caps",), caps={"type": ["object", "null"]}))
async def set_caps(agent_id: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    """Body ``{caps}``: keys of ``CAP_FIELDS`` (docs/runtime/accounting.md); ``null`` clears."""
    agent_arg(p, agent_id)
    body = await json_body(request)
    _fields(body, ("caps",))
    caps = body["caps"]
    if caps is not None and not isinstance(caps, dict):
        raise InvalidInput("caps: must be an object or null")
    out: dict[str, Any] = await _act(request, p, "set_caps", agent_id, None,
                                     lambda rc: rc.set_caps(agent_id, caps))
    return out


@router.put("/agents/{agent_id}/subagents/{name}", summary="Add, replace or (null) remove a catalog spec",
            openapi_extra=_body(("spec",), spec={"type": ["object", "null"]}))
async def set_subagent_spec(agent_id: str, name: str, request: Request,
                            p: Principal = OPERATOR) -> dict[str, Any]:
    """Body ``{spec}``: ``{description, tools, max_iterations, instructions}`` or ``null`` (D12)."""
    agent_arg(p, agent_id)
    body = await json_body(request)
    _fields(body, ("spec",))
    out: dict[str, Any] = await _act(request, p, "set_subagent_spec", agent_id, name[:64],
                                     lambda rc: rc.set_subagent_spec(agent_id, name, body["spec"]))
    return out


# --- sub-agents ----------------------------------------------------------------------------------


@router.post("/agents/{agent_id}/spawn", summary="Spawn a child from the root's catalog",
             openapi_extra=_body(("spec", "input"), spec={"type": "string"}, input={"type": "string"},
                                 name={"type": "string"}, session={"type": "string"},
                                 request_id={"type": "string"}))
async def spawn(agent_id: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    """Body ``{spec, input, name?, session?, request_id?}``; a retry with the same ``request_id`` returns
    the same handle (``created`` false)."""
    agent_arg(p, agent_id)
    f = _fields(await json_body(request), ("spec", "input"), ("name", "session", "request_id"))
    out: dict[str, Any] = await _act(
        request, p, "spawn", agent_id, f.get("request_id"),
        lambda rc: rc.spawn(agent_id, f["spec"], f["input"], f.get("name"), f.get("session", "main"),
                            f.get("request_id")))
    return out


@router.get("/handles/{handle}", summary="A handle's item")
async def poll(handle: str, request: Request, p: Principal = VIEWER) -> dict[str, Any]:
    """``{handle, name, spec, status, answer, error}``."""
    await run_in_threadpool(_handle_owner, request, p, handle)
    rc = _client(request, p)
    out: dict[str, Any] = await run_in_threadpool(rc.poll, handle)
    return out


@router.post("/handles/{handle}/cancel", summary="Cancel a handle and everything below it",
             openapi_extra=_body((), reason={"type": "string"}))
async def cancel(handle: str, request: Request, p: Principal = OPERATOR) -> dict[str, Any]:
    """Body ``{reason?}`` (100 characters kept); the answer lists the handles cancelled."""
    await run_in_threadpool(_handle_owner, request, p, handle)
    f = _fields(await json_body(request), (), ("reason",))
    reason = f.get("reason", "operator")
    if not isinstance(reason, str):
        raise InvalidInput("reason: must be a string")
    cancelled = await _act(request, p, "cancel", None, handle, lambda rc: rc.cancel(handle, reason))
    return {"cancelled": cancelled}
