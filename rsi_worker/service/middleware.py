"""ASGI middleware of the service: request body limits and request metrics.

**Body limits** (docs/service/api.md, *Limits*): ``POST /v1/agents/{id}/turns`` may carry
``RSI_API_MAX_BODY_BYTES`` (a world is large); every other request at most :data:`SMALL_BODY_BYTES`.
A ``Content-Length`` over the limit is refused before the body is read; a chunked body is counted as
it arrives and refused the moment it crosses the limit. Either way the answer is a 413 problem
document and nothing is stored (the body never reaches a handler).
"""

from __future__ import annotations

import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rsi_worker.service.metrics import ServiceMetrics

__all__ = ["SMALL_BODY_BYTES", "BodyLimit", "BodyTooLarge", "RequestMetrics", "body_limit"]

SMALL_BODY_BYTES = 64_000
_TURNS = re.compile(r"/v1/agents/[^/]+/turns")


class BodyTooLarge(Exception):
    """A chunked body crossed its limit while a handler read it."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is over the limit of {limit:,} bytes")
        self.limit = limit


def body_limit(method: str, path: str, big_bytes: int) -> int:
    """The body limit of a request, in bytes."""
    return big_bytes if method == "POST" and _TURNS.fullmatch(path) else SMALL_BODY_BYTES


async def _send_413(send: Send, limit: int) -> None:
    import json

    body = json.dumps(
        {
            "type": "urn:rsi:problem:body-too-large",
            "title": "Request body too large",
            "status": 413,
            "detail": f"the request body is over the limit of {limit:,} bytes",
            "limit_bytes": limit,
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse request bodies over their limit (module docstring)."""

    def __init__(self, app: ASGIApp, big_bytes: int) -> None:
        self.app, self.big_bytes = app, big_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(scope["method"], scope["path"], self.big_bytes)
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = limit + 1
                if declared > limit:
                    await _send_413(send, limit)
                    return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watch)
        except BodyTooLarge:
            if not started:
                await _send_413(send, limit)


class RequestMetrics:
    """Count requests and time them to the response start, by route template."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                route: Any = scope.get("route")
                name = getattr(route, "path", None) or "unmatched"
                self.metrics.observe(name, scope["method"], int(message["status"]), time.perf_counter() - t0)
            await send(message)

        await self.app(scope, receive, timed)
