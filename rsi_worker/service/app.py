"""The ASGI application: :func:`create_app` wires the routers, the console, the middleware and the
error handlers around one :class:`~rsi_worker.service.state.ServiceState`.

Unauthenticated: ``/healthz`` (the process answers) and ``/readyz`` (the database and Redis answer).
Everything else needs a token — ``/metrics`` and ``/v1/openapi.json`` too (any valid token for the
OpenAPI document, ``viewer`` for the metrics). No interactive API docs are served: they load scripts
from a CDN, and the console must work without internet.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from rsi_worker.service import api_evolve, api_host, api_operator, api_read, api_runtime
from rsi_worker.service.auth import Principal
from rsi_worker.service.console import evolve_pages, runtime_pages
from rsi_worker.service.console import routes as console_routes
from rsi_worker.service.deps import need, state
from rsi_worker.service.middleware import BodyLimit, RequestMetrics
from rsi_worker.service.problems import install_handlers, problem_response
from rsi_worker.service.state import ServiceState

__all__ = ["API_VERSION", "create_app"]

API_VERSION = "1"
VIEWER = Depends(need("viewer"))
ANY_TOKEN = Depends(need(None))


def _ready(svc: ServiceState) -> dict[str, str]:
    out = {}
    try:
        with svc.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        out["database"] = "ok"
    except Exception as exc:
        out["database"] = type(exc).__name__
    try:
        svc.redis.ping()
        out["redis"] = "ok"
    except Exception as exc:
        out["redis"] = type(exc).__name__
    return out


def create_app(svc: ServiceState, *, close_state: bool = True) -> FastAPI:
    """The service's ASGI app around ``svc`` (closed at shutdown when ``close_state``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if close_state:
            svc.close()
        else:
            svc.hub.stop()

    app = FastAPI(
        title="rsi-worker service",
        version=API_VERSION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        description="Record turns, read harnesses and steer consolidation over HTTP "
        "(docs/service/api.md). Errors are RFC 9457 problem documents.",
    )
    app.state.svc = svc
    install_handlers(app)
    app.include_router(api_host.router)
    app.include_router(api_read.router)
    app.include_router(api_operator.router)
    app.include_router(api_runtime.router)
    app.include_router(api_evolve.router)
    app.include_router(console_routes.router)
    app.include_router(runtime_pages.router)
    app.include_router(evolve_pages.router)
    console_routes.mount_static(app)

    @app.get("/healthz", tags=["system"], summary="The process answers (no token)")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["system"], summary="Database and Redis answer (no token)")
    async def readyz(request: Request) -> Any:
        checks = await run_in_threadpool(_ready, state(request))
        if all(v == "ok" for v in checks.values()):
            return {"status": "ready", **checks}
        return problem_response(request, 503, "not-ready", "a backend does not answer", checks=checks)

    @app.get("/metrics", tags=["system"], summary="Prometheus metrics (scope viewer)")
    def metrics(request: Request, p: Principal = VIEWER) -> Response:
        svc_ = state(request)
        svc_.metrics.set_limit_errors(svc_.auth.limiter.errors)
        return Response(svc_.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/openapi.json", tags=["system"], summary="This API's OpenAPI document (any token)")
    def openapi(p: Principal = ANY_TOKEN) -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=303)

    app.add_middleware(BodyLimit, big_bytes=svc.settings.api_max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=svc.metrics)  # outermost: sees every answer
    return app
