"""What one service replica holds while it runs: settings, the host client, the session factory,
Redis, the authenticator, the harness-change hub and the metrics. Built once by
:func:`rsi_worker.service.create_app` and reached from a request as ``request.app.state.svc``.

The replica keeps no state of its own that another replica needs: tokens and the audit log are in
SQL, rate-limit windows and harness changes in Redis, so any number of replicas serve the same
cluster behind one load balancer.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import redis
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.dispatch import Dispatcher
from rsi_worker.service.auth import Authenticator
from rsi_worker.service.events import HarnessHub
from rsi_worker.service.metrics import ServiceMetrics
from rsi_worker.service.ratelimit import RateLimiter

__all__ = ["ServiceState", "build_state"]

log = logging.getLogger(__name__)


@dataclass
class ServiceState:
    """One replica's objects (module docstring). :meth:`close` closes what it built."""

    settings: Settings
    client: RsiClient
    sessions: sessionmaker[Session]
    redis: redis.Redis
    auth: Authenticator
    hub: HarnessHub
    metrics: ServiceMetrics
    owned: list[Callable[[], None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    workers_cache: tuple[float, list[str]] | None = None
    """``(expires, worker names)`` of the last Celery ping (``rsi_worker.service.cluster``)."""

    @property
    def engine(self) -> Engine:
        return self.client.engine

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only session (a deferred transaction on SQLite: no write lock)."""
        with self.sessions() as s:
            s.connection(execution_options={"sqlite_begin": "DEFERRED"})
            yield s

    def close(self) -> None:
        self.hub.stop()
        self.client.close()
        while self.owned:
            try:
                self.owned.pop()()
            except Exception as exc:  # shutting down: log, go on
                log.debug("closing failed: %s", type(exc).__name__)


def build_state(
    settings: Settings,
    *,
    engine: Engine | None = None,
    redis_client: redis.Redis | None = None,
    dispatcher: Dispatcher | None = None,
) -> ServiceState:
    """Build a replica's objects from the settings; objects passed in are used, never closed.

    Raises:
        SettingsError: ``RSI_REDIS_URL`` is unset and no Redis client and dispatcher were passed.
    """
    client = RsiClient(settings, engine=engine, redis=redis_client, dispatcher=dispatcher)
    sessions = db.session_factory(client.engine)
    auth = Authenticator(sessions, RateLimiter(client.redis), settings.api_rate_per_min)
    hub = HarnessHub(client.redis)
    return ServiceState(settings, client, sessions, client.redis, auth, hub, ServiceMetrics())
