"""Host endpoints (scope ``host``): record a turn, record signals, read the current harness (ETag,
304), and the event streams of harness changes (docs/service/api.md, *Host endpoints*).

Recording goes through :class:`~rsi_common.client.RsiClient` unchanged, so the service has the same
input boundary, the same errors and the same "the turn never waits" hand-off as the library.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from rsi_common import db
from rsi_common.harness import H0_VERSION
from rsi_worker.service.auth import Principal
from rsi_worker.service.deps import agent_arg, json_body, need, state
from rsi_worker.service.events import RESET, RETRY_MS, HarnessHub, sse, stream_items
from rsi_worker.service.schemas import HarnessOut, RecordedTurnOut
from rsi_worker.service.state import ServiceState

__all__ = ["harness_state", "router"]

router = APIRouter(prefix="/v1", tags=["host"])
HOST = Depends(need("host"))

_TURN_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "world": {"type": "object", "description": "the captured rsi-world/1 record"},
                        "trajectory": {"type": "object"},
                        "signals": {"type": "object"},
                        "own_loop": {"type": "boolean"},
                        "io_id": {"type": "string"},
                    },
                }
            }
        },
    }
}
_SIGNALS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "expected": {"type": "string"},
                        "stars": {"type": ["integer", "null"]},
                        "issue": {"type": "string"},
                        "comment": {"type": "string"},
                        "criteria": {"type": "array", "items": {"type": "string"}},
                    },
                }
            }
        },
    }
}


@router.post(
    "/agents/{agent_id}/turns",
    response_model=RecordedTurnOut,
    openapi_extra=_TURN_BODY,
    summary="Record a finished turn",
)
async def record_turn(agent_id: str, request: Request, p: Principal = HOST) -> dict[str, Any]:
    """Store the turn (``{world, trajectory, signals, own_loop, io_id}``, as ``RsiClient.record_turn``)
    and trigger the agent's consolidation; never waits for it. Recording the same ``io_id`` again
    stores nothing new."""
    agent_arg(p, agent_id)
    body = await json_body(request)
    svc = state(request)
    recorded = await run_in_threadpool(svc.client.record_turn, agent_id, body)
    return dataclasses.asdict(recorded)


@router.post(
    "/agents/{agent_id}/turns/{io_id}/signals",
    response_model=RecordedTurnOut,
    openapi_extra=_SIGNALS_BODY,
    summary="Record signals of a stored turn",
)
async def record_signals(agent_id: str, io_id: str, request: Request, p: Principal = HOST) -> dict[str, Any]:
    """Merge explicit signals into the stored turn and trigger like a recorded turn."""
    agent_arg(p, agent_id)
    body = await json_body(request)
    svc = state(request)
    recorded = await run_in_threadpool(svc.client.record_signals, agent_id, io_id, body)
    return dataclasses.asdict(recorded)


def harness_state(svc: ServiceState, agent_id: str) -> dict[str, Any]:
    """The harness the agent's next turn must use: ``{agent_id, version, label, payload}``."""
    harness = svc.client.current_harness(agent_id)
    label = "fixed" if svc.settings.harness_dir else ("h0" if harness.version == H0_VERSION else "agent")
    return {"agent_id": agent_id, "version": harness.version, "label": label, "payload": harness.payload()}


def _etag(version: str) -> str:
    return f'"{version}"'


@router.get(
    "/agents/{agent_id}/harness",
    response_model=HarnessOut,
    summary="The current harness",
    responses={304: {"description": "unchanged since the ETag in If-None-Match"}},
)
async def current_harness(agent_id: str, request: Request, response: Response, p: Principal = HOST) -> Any:
    """The harness of the agent's next turn (H0 for an agent never seen). ``ETag`` is its version;
    send it back in ``If-None-Match`` to get 304 while it is unchanged."""
    agent_arg(p, agent_id)
    svc = state(request)
    out = await run_in_threadpool(harness_state, svc, agent_id)
    etag = _etag(out["version"])
    if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers={"ETag": etag})
    response.headers["ETag"] = etag
    response.headers["Cache-Control"] = "no-cache"
    return out


RECENT_S = 60.0
"""An adoption or an operator action this recent names the change an event reports."""
_MOVES = ("rollback", "pin", "freeze", "unfreeze", "clone")


def _agent_state(svc: ServiceState, agent_id: str) -> dict[str, Any]:
    """The agent's harness state for events, and what most recently moved it (``_why``, internal)."""
    with svc.read() as s:
        row = s.get(db.AgentRow, agent_id)
        if row is None:
            return {
                "agent_id": agent_id,
                "version": H0_VERSION,
                "frozen": False,
                "adopted_by": None,
                "_why": None,
            }
        adopted, why = None, None
        if row.current_version:
            h = s.execute(
                sa.select(db.HarnessRow.run_id).where(
                    db.HarnessRow.agent_id == agent_id, db.HarnessRow.version == row.current_version
                )
            ).scalar()
            run = s.get(db.RunRow, h) if h else None
            if run is not None and run.status == "adopted":
                adopted = run.id
                why = ("adoption", run.finished_at)
        move = s.execute(
            sa.select(db.AuditRow.action, db.AuditRow.at)
            .where(
                db.AuditRow.agent_id == agent_id, db.AuditRow.outcome == "ok", db.AuditRow.action.in_(_MOVES)
            )
            .order_by(db.AuditRow.id.desc())
            .limit(1)
        ).first()
        if move is not None and (why is None or why[1] is None or move.at >= why[1]):
            why = (str(move.action), move.at)
        recent = (
            why is not None
            and why[1] is not None
            and (datetime.now(UTC) - why[1]).total_seconds() <= RECENT_S
        )
        return {
            "agent_id": agent_id,
            "version": row.current_version or H0_VERSION,
            "frozen": row.frozen,
            "adopted_by": adopted,
            "_why": why[0] if why is not None and recent else None,
        }


def classify(before: dict[str, Any] | None, now: dict[str, Any]) -> str | None:
    """What changed: ``adoption``, ``rollback``, ``pin``, ``freeze``, ``unfreeze``, ``clone``; ``None``
    when the stream already sent this state.

    The newest recent cause wins — an adoption (its run's finish) or an operator action through the
    service (the audit log). Without one (a CLI move, or an old cause) the difference decides:
    version and freeze → ``pin``, version → ``rollback``, freeze flag → ``freeze``/``unfreeze``; a
    stream that never saw the agent says ``change``."""
    if before is not None and (before["version"], before["frozen"]) == (now["version"], now["frozen"]):
        return None
    if now.get("_why"):
        return str(now["_why"])
    if before is None:
        return "change"
    if before["version"] != now["version"]:
        return "pin" if now["frozen"] and not before["frozen"] else "rollback"
    return "freeze" if now["frozen"] else "unfreeze"


def _public(state_: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state_.items() if not k.startswith("_")}


async def _changes(
    svc: ServiceState,
    hub: HarnessHub,
    p: Principal,
    agents: list[str] | None,
) -> AsyncIterator[bytes]:
    """The event stream (docs/service/api.md): current state first, then one event per change."""
    wanted = set(agents) if agents is not None else None
    sub = hub.subscribe(lambda a: p.sees(a) and (wanted is None or a in wanted))
    svc.metrics.streams.inc()
    sent: dict[str, dict[str, Any]] = {}
    try:
        yield f"retry: {RETRY_MS}\n\n".encode()
        for agent in agents or []:
            now = await run_in_threadpool(_agent_state, svc, agent)
            sent[agent] = now
            yield sse("harness", {**_public(now), "change": "current"}, event_id=now["version"])
        if agents is None:
            yield sse("ready", {"agent_prefix": p.agent_prefix})
        async for item in stream_items(hub, sub):
            if item is None:
                yield b": keep-alive\n\n"
                continue
            for agent in list(sent) if item == RESET else [item]:
                now = await run_in_threadpool(_agent_state, svc, agent)
                change = classify(sent.get(agent), now)
                if change is not None:
                    sent[agent] = now
                    yield sse("harness", {**_public(now), "change": change}, event_id=now["version"])
            if item == RESET and agents is None:
                yield sse("reset", {})
    finally:
        svc.metrics.streams.dec()


_SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "harness events"}
}


@router.get(
    "/agents/{agent_id}/harness/events",
    response_class=StreamingResponse,
    responses=_SSE_DOC,
    summary="Harness changes of one agent (server-sent events)",
)
async def harness_events(agent_id: str, request: Request, p: Principal = HOST) -> StreamingResponse:
    """``event: harness`` with ``{agent_id, version, frozen, adopted_by, change}`` — first the current
    state (``change: current``), then every adoption, rollback, pin, freeze, unfreeze or clone."""
    agent_arg(p, agent_id)
    svc = state(request)
    return _stream(_changes(svc, svc.hub, p, [agent_id]))


@router.get(
    "/harness/events",
    response_class=StreamingResponse,
    responses=_SSE_DOC,
    summary="Harness changes of every agent the token sees (server-sent events)",
)
async def all_harness_events(request: Request, p: Principal = HOST) -> StreamingResponse:
    """One stream for a host with many agents: ``event: ready`` once, then ``event: harness`` for every
    change of an agent inside the token's prefix (``change: change`` the first time an agent is
    seen, since the stream cannot know its earlier state), and ``event: reset`` when changes may
    have been missed (drop every cached harness)."""
    svc = state(request)
    return _stream(_changes(svc, svc.hub, p, None))


def _stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        body, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
