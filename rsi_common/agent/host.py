"""Where an ``Agent`` records its turns: the host client and the history database it opens
(docs/host/agent.md#where-turns-go).

Three ways, picked once when the agent first runs:

* **a client given** (``client=``): an :class:`~rsi_common.client.RsiClient` or
  :class:`~rsi_common.http_client.RsiHttpClient` the host built (e.g. an embedded cluster's
  ``client()``); used, never closed.
* **over HTTP** (``service_url=`` and ``token=``, the one flag): an :class:`RsiHttpClient`; the
  conversation history is kept in a SQLite file of the host, ``<RSI_HOME>/history.db``.
* **from the settings**: an :class:`RsiClient` on ``RSI_DATABASE_URL`` and ``RSI_REDIS_URL``. With no
  ``RSI_REDIS_URL`` (nothing configured) this is the **embedded default**: the SQLite file
  ``RSI_DATABASE_URL`` (default ``.rsi/rsi.db``, migrated here: the agent owns it), coordination on an
  in-process fakeredis, and no broker — each turn is stored with its consolidation *deferred*; a
  cluster started on the same database later (``rsi worker``, whose sweeper hands stored turns off)
  consolidates them. A PostgreSQL database is never migrated here (``rsi db upgrade``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common import db
from rsi_common.client import RecordedTurn, RsiClient
from rsi_common.config import Settings
from rsi_common.errors import BrokerUnavailable, InvalidInput
from rsi_common.kernel import EventSink, TurnPlan, TurnResult
from rsi_common.llm import ModelClient

__all__ = ["Host", "HostClient", "NoCluster", "open_host"]


class HostClient(Protocol):
    """What the agent uses of a host client (``RsiClient`` and ``RsiHttpClient`` both have it)."""

    def run_turn(self, agent_id: str, plan: TurnPlan, model_client: ModelClient, *, seed: int | None = None,
                 on_event: EventSink | None = None,
                 cancelled: Callable[[], bool] | None = None) -> TurnResult: ...

    def record_signals(self, agent_id: str, io_id: str, signals: dict[str, Any]) -> RecordedTurn: ...

    def close(self) -> None: ...


class NoCluster:
    """The dispatcher of the embedded default: there is no broker, so every hand-off is deferred
    (the world stays stored, un-enqueued, for a cluster's sweeper)."""

    def enqueue(self, task: str, args: list[Any], queue: str) -> str:
        """Always raises :class:`BrokerUnavailable`."""
        raise BrokerUnavailable("no cluster is configured (RSI_REDIS_URL unset): consolidation deferred")


@dataclass
class Host:
    """An opened host: its client, the history engine, and what to close."""

    client: HostClient
    engine: Engine
    mode: str
    """``client``, ``http``, ``settings`` or ``embedded``."""
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        """Close what :func:`open_host` built (never a client that was given)."""
        while self.closers:
            self.closers.pop()()


def _sqlite(url: str) -> bool:
    return sa.make_url(url).get_backend_name() == "sqlite"


def _engine(url: str, closers: list[Callable[[], None]], *, migrate: bool) -> Engine:
    engine = db.make_engine(url)
    closers.append(engine.dispose)
    if migrate:
        db.upgrade(engine)
    return engine


def open_host(settings: Settings, *, client: HostClient | None = None, engine: Engine | None = None,
              service_url: str | None = None, token: str | None = None) -> Host:
    """Open the host of an agent (module docstring).

    Args:
        settings: the agent's settings.
        client: a host client to use as is.
        engine: the engine of the conversation history (default: the client's own database, or the
            SQLite files of the module docstring).
        service_url / token: record over HTTP.

    Raises:
        InvalidInput: ``service_url`` without ``token`` (or the other way round), or both a client and
            a service URL.
        SettingsError: the database or Redis settings are unusable.
    """
    closers: list[Callable[[], None]] = []
    if (service_url is None) != (token is None):
        raise InvalidInput("service_url and token: give both to record over HTTP, or neither")
    if client is not None and service_url is not None:
        raise InvalidInput("client and service_url: give one of them")
    history_url = f"sqlite:///{Path(settings.home).expanduser().resolve() / 'history.db'}"
    if client is not None:
        own = getattr(client, "engine", None)
        if engine is None and isinstance(own, Engine):
            engine = own
        return Host(client, engine or _engine(history_url, closers, migrate=True), "client", closers)
    if service_url is not None and token is not None:
        from rsi_common.http_client import RsiHttpClient

        http = RsiHttpClient(service_url, token, record_world=settings.record_world)
        closers.append(http.close)
        return Host(http, engine or _engine(history_url, closers, migrate=True), "http", closers)
    if settings.redis_url:
        lib = RsiClient(settings, engine=engine)
        closers.append(lib.close)
        return Host(lib, engine or lib.engine, "settings", closers)
    import fakeredis

    own_engine = engine or _engine(settings.database_url, closers, migrate=_sqlite(settings.database_url))
    fake = fakeredis.FakeRedis()
    closers.append(fake.close)
    lib = RsiClient(settings, engine=own_engine, redis=fake, dispatcher=NoCluster())
    closers.append(lib.close)
    return Host(lib, own_engine, "embedded", closers)
