"""Fixtures of the host-client tests: a migrated database (SQLite and PostgreSQL), the session
redis-server, a :class:`~rsi_common.dispatch.RecordingDispatcher`, and a client built from them."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.client import RsiClient, redis_client
from rsi_common.config import Settings
from rsi_common.db import session_factory
from rsi_common.dispatch import RecordingDispatcher

GOLDEN_WORLD = Path(__file__).resolve().parents[2] / "golden" / "world" / "rsi-world-1.json"
_TEMPLATE: dict[str, Any] = json.loads(GOLDEN_WORLD.read_text(encoding="utf-8"))


def make_world(io: str, clock: float = 1_700_000_000.0, *, agent: str = "", interaction: str = "c1",
               **extra: Any) -> dict[str, Any]:
    """A valid ``rsi-world/1`` record (the golden world) with the given ids and clock."""
    w = copy.deepcopy(_TEMPLATE)
    w.pop("bytes", None)
    w.update(io_id=io, clock=clock, agent_id=agent, interaction_id=interaction, **extra)
    return w


def make_settings(db_url: str, redis_url: str | None, **overrides: Any) -> Settings:
    return Settings(database_url=db_url, redis_url=redis_url, **overrides)


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)


@pytest.fixture
def rclient(redis_url: str) -> Iterator[redis.Redis]:
    client = redis_client(redis_url)
    yield client
    client.close()


@pytest.fixture
def recorder() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def make_client(db_url: str, redis_url: str, engine: Engine, rclient: redis.Redis,
                recorder: RecordingDispatcher) -> Iterator[Callable[..., RsiClient]]:
    """Build clients on the test database and Redis (recording dispatcher unless one is given);
    all are closed at the end of the test."""
    made: list[RsiClient] = []

    def build(**kw: Any) -> RsiClient:
        settings = kw.pop("settings", None) or make_settings(db_url, redis_url, **kw.pop("overrides", {}))
        kw.setdefault("engine", engine)
        kw.setdefault("redis", rclient)
        kw.setdefault("dispatcher", recorder)
        client = RsiClient(settings, **kw)
        made.append(client)
        return client

    yield build
    for client in made:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., RsiClient]) -> RsiClient:
    return make_client()
