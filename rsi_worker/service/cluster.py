"""The cluster view: queue depths, live workers, runs in flight, recent failures.

* Queue depths are the lengths of the broker's Redis lists (Celery's Redis transport keeps one list per
  queue and priority: ``<queue>`` and ``<queue>\\x06\\x16<priority>``).
* Live workers answer a Celery ``ping`` broadcast (0.5 s); the answer is cached per replica for
  :data:`WORKERS_CACHE_S` seconds so a busy console does not flood the broker.
* Runs in flight and recent failures come from SQL, filtered by the token's agent-id prefix.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from rsi_common.db import RunRow
from rsi_common.dispatch import QUEUES, kombu_url
from rsi_worker.service.state import ServiceState

__all__ = ["WORKERS_CACHE_S", "cluster_view", "live_workers", "queue_depths"]

WORKERS_CACHE_S = 5.0
_PRIORITIES = range(1, 10)


def queue_depths(svc: ServiceState) -> dict[str, int | None]:
    """Messages waiting per queue (``None`` each when Redis cannot be read)."""
    out: dict[str, int | None] = {}
    try:
        pipe = svc.redis.pipeline()
        for q in QUEUES:
            pipe.llen(q)
            for p in _PRIORITIES:
                pipe.llen(f"{q}\x06\x16{p}")
        counts = pipe.execute()
    except Exception:  # a display: never fail the page
        return dict.fromkeys(QUEUES)
    step = 1 + len(_PRIORITIES)
    for i, q in enumerate(QUEUES):
        out[q] = int(sum(counts[i * step : (i + 1) * step]))
    return out


def live_workers(svc: ServiceState) -> list[str]:
    """Names of the workers that answered a ping (cached, module docstring); ``[]`` without a broker."""
    url = svc.settings.redis_url
    if not url:
        return []
    now = time.monotonic()
    with svc.lock:
        hit = svc.workers_cache
    if hit is not None and hit[0] > now:
        return hit[1]
    from celery import Celery

    app = Celery("rsi-service-ping", broker=kombu_url(url), set_as_current=False)
    try:
        replies = app.control.ping(timeout=0.5) or []
        names = sorted(name for reply in replies for name in reply)
    except Exception:
        names = []
    finally:
        app.close()
    with svc.lock:
        svc.workers_cache = (now + WORKERS_CACHE_S, names)
    return names


def _runs(svc: ServiceState, prefix: str | None, where: Any, limit: int) -> list[dict[str, Any]]:
    stmt = sa.select(
        RunRow.id, RunRow.agent_id, RunRow.status, RunRow.reason, RunRow.started_at, RunRow.finished_at
    ).where(where)
    if prefix:
        stmt = stmt.where(RunRow.agent_id.startswith(prefix, autoescape=True))
    with svc.read() as s:
        rows = s.execute(stmt.order_by(RunRow.started_at.desc()).limit(limit)).all()
    return [
        {
            "run_id": r.id,
            "agent_id": r.agent_id,
            "status": r.status,
            "reason": r.reason,
            "started_at": r.started_at.isoformat(),
            "finished_at": r.finished_at.isoformat() if r.finished_at else None,
        }
        for r in rows
    ]


def cluster_view(svc: ServiceState, prefix: str | None) -> dict[str, Any]:
    """Everything the cluster page and ``GET /v1/cluster`` show (module docstring)."""
    return {
        "queues": queue_depths(svc),
        "workers": live_workers(svc),
        "running": _runs(svc, prefix, RunRow.status == "running", 100),
        "recent_failures": _runs(svc, prefix, RunRow.status.in_(("failed", "interrupted")), 20),
    }
