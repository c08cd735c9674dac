"""Connection objects built once from :class:`~rsi_common.config.Settings` (docs/architecture.md#5-modes).

The same code runs in every mode; only what is built here differs: a real Redis for
``RSI_REDIS_URL``, else fakeredis in-process (the embedded in-process mode). Nothing here starts
servers; :mod:`rsi_worker.local.embedded` does that for the one-command local mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.config import Settings
from rsi_common.coord import Coordinator
from rsi_common.db import make_engine, session_factory, upgrade
from rsi_common.dispatch import redis_py_url
from rsi_worker.consolidate import Deps, ModelFactory, default_models
from rsi_worker.observability.metrics import NULL_METRICS, Metrics

__all__ = ["Runtime", "open_runtime", "redis_client"]

_FAKE_SERVERS: dict[str, Any] = {}


def redis_client(settings: Settings) -> redis.Redis:
    """A client of ``RSI_REDIS_URL``; without one, an in-process fakeredis (one server per home)."""
    if settings.redis_url:
        return redis.Redis.from_url(
            redis_py_url(settings.redis_url),
            socket_timeout=10,
            socket_connect_timeout=2,
            health_check_interval=30,
        )
    import fakeredis

    key = str(Path(settings.home).resolve())
    server = _FAKE_SERVERS.setdefault(key, fakeredis.FakeServer())
    return fakeredis.FakeRedis(server=server)


@dataclass
class Runtime:
    """What a worker or a CLI command holds while it runs."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    redis: redis.Redis
    coord: Coordinator
    deps: Deps

    def close(self) -> None:
        self.engine.dispose()
        self.redis.close()


def open_runtime(settings: Settings, *, migrate: bool = False, models: ModelFactory | None = None,
                 metrics: Metrics | None = None) -> Runtime:
    """Build the engine, session factory, Redis client, coordinator and pipeline deps.

    Args:
        migrate: run the Alembic migrations first (embedded mode and the CLI's local use).
        models: model factory override (tests); default from settings.
        metrics: where the pipeline counts runs and trials (a worker's registry); default: no-op.
    """
    if settings.database_url.startswith("sqlite:///"):
        Path(settings.database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.database_url)
    if migrate:
        upgrade(engine)
    sessions = session_factory(engine)
    client = redis_client(settings)
    coord = Coordinator(client, lease_s=settings.lease_s)
    deps = Deps(settings, sessions, coord, models or default_models(settings),
                metrics=metrics if metrics is not None else NULL_METRICS)
    return Runtime(settings, engine, sessions, client, coord, deps)
