"""Errors as RFC 9457 problem documents (docs/service/api.md, *Errors*).

Every error the service answers is ``application/problem+json``::

    {"type": "urn:rsi:problem:invalid-input", "title": "Invalid input", "status": 422,
     "detail": "signals.stars: must be an integer 1..5 or null, got str", "instance": "/v1/…"}

``detail`` is the library's own message (it starts with the field path and never holds a value that
could be secret; see docs/security/input-boundary.md), or a fixed sentence for backend failures — a
database or Redis error is named by its kind only, never by its message. Extension members:
``error`` (the library's error class) on input errors, ``retry_after_s`` on 429 and 503.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rsi_common.credentials import redact
from rsi_common.errors import (
    InfrastructureError,
    InputLimitError,
    InvalidInput,
    UnknownAgentError,
    UnknownVersionError,
)

__all__ = ["PROBLEM_JSON", "Problem", "install_handlers", "problem_response"]

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Request body too large",
    415: "Unsupported media type",
    422: "Invalid input",
    429: "Too many requests",
    500: "Internal error",
    503: "Service unavailable",
}


class Problem(Exception):
    """Raise to answer with a problem document.

    Args:
        status: HTTP status.
        slug: the problem type's last segment (``urn:rsi:problem:<slug>``).
        detail: one sentence for the caller; never a secret.
        headers: extra response headers (``WWW-Authenticate``, ``Retry-After``).
        extra: extension members.
    """

    def __init__(
        self, status: int, slug: str, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.status, self.slug, self.detail = status, slug, detail
        self.headers = headers or {}
        self.extra = extra


def problem_response(
    request: Request | None,
    status: int,
    slug: str,
    detail: str,
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """A problem document response."""
    body: dict[str, Any] = {
        "type": f"urn:rsi:problem:{slug}",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if request is not None:
        body["instance"] = redact(request.url.path)  # a path may carry a pasted secret
    body.update(extra)
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


def _input_status(exc: InvalidInput) -> tuple[int, str]:
    if isinstance(exc, UnknownAgentError | UnknownVersionError):
        return 404, "unknown-agent" if isinstance(exc, UnknownAgentError) else "unknown-version"
    if isinstance(exc, InputLimitError):
        return 422, "input-limit"
    return 422, "invalid-input"


def install_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` with a problem document (module docstring)."""

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(request, exc.status, exc.slug, exc.detail, headers=exc.headers, **exc.extra)

    @app.exception_handler(InvalidInput)
    async def _invalid(request: Request, exc: InvalidInput) -> JSONResponse:
        status, slug = _input_status(exc)
        return problem_response(request, status, slug, redact(str(exc))[:1000], error=type(exc).__name__)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("query", "path", "body"))
        return problem_response(
            request,
            422,
            "invalid-input",
            f"{where or 'request'}: {first.get('msg', 'invalid')}",
            error="InvalidInput",
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        detail = exc.detail if isinstance(exc.detail, str) else _TITLES.get(exc.status_code, "error")
        return problem_response(request, exc.status_code, slug, detail, headers=dict(exc.headers or {}))

    @app.exception_handler(SQLAlchemyError)
    async def _database(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        log.warning("%s %s: database error %s", request.method, request.url.path, type(exc).__name__)
        return problem_response(
            request,
            503,
            "database-unavailable",
            "the database failed; retry later",
            headers={"Retry-After": "1"},
            retry_after_s=1,
        )

    @app.exception_handler(redis.RedisError)
    async def _redis(request: Request, exc: redis.RedisError) -> JSONResponse:
        log.warning("%s %s: Redis error %s", request.method, request.url.path, type(exc).__name__)
        return problem_response(
            request,
            503,
            "redis-unavailable",
            "Redis failed; retry later",
            headers={"Retry-After": "1"},
            retry_after_s=1,
        )

    @app.exception_handler(InfrastructureError)
    async def _infra(request: Request, exc: InfrastructureError) -> JSONResponse:
        return problem_response(
            request,
            503,
            "backend-unavailable",
            f"a backend failed ({type(exc).__name__})",
            headers={"Retry-After": "1"},
            retry_after_s=1,
        )

    from rsi_worker.service.middleware import BodyTooLarge

    @app.exception_handler(BodyTooLarge)
    async def _too_large(request: Request, exc: BodyTooLarge) -> JSONResponse:
        return problem_response(request, 413, "body-too-large", str(exc), limit_bytes=exc.limit)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s: unexpected %s", request.method, request.url.path, type(exc).__name__, exc_info=exc)
        return problem_response(request, 500, "internal-error", "an unexpected error; see the service log")
