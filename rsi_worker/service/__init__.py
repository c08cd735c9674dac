"""The service boundary of rsi-worker (issue 14): a stateless ASGI service — the ``/v1`` JSON API for
hosts in any language and for operators, and the server-rendered web console — over the same
cluster (SQL + Redis + Celery) as the library (docs/service/api.md, docs/service/console.md,
docs/service/access.md).

Usage::

    svc = build_state(Settings())           # RsiClient, sessions, Redis, auth, hub, metrics
    app = create_app(svc)                   # FastAPI app; serve with uvicorn (``rsi serve``)
"""

from __future__ import annotations

from rsi_worker.service.app import create_app
from rsi_worker.service.auth import Principal
from rsi_worker.service.server import LiveServer, serve
from rsi_worker.service.state import ServiceState, build_state

__all__ = ["LiveServer", "Principal", "ServiceState", "build_state", "create_app", "serve"]
