"""Fixtures of the service tests: a live uvicorn server (a real TCP socket) over a migrated database
and a real redis-server, tokens of every scope made at run time, and an httpx client per token."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import Engine

from rsi_common import db
from rsi_common.config import Settings
from rsi_common.dispatch import KombuDispatcher
from rsi_worker.service import LiveServer, ServiceState, build_state, create_app
from tests.support.migrated import migrated_sqlite_url

SCOPES = ("host", "viewer", "operator", "admin")


@dataclass
class Live:
    """A running service and what the tests need from it."""

    server: LiveServer
    svc: ServiceState
    engine: Engine
    tokens: dict[str, str] = field(default_factory=dict)
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def token(self, name: str, scopes: tuple[str, ...], **kw: Any) -> str:
        with self.svc.sessions.begin() as s:
            return db.create_token(s, name, scopes, **kw).token

    def login(self, page: Any, token: str, path: str, *, refused: bool = False) -> None:
        """Open console ``path`` in a browser ``page`` with no session: the login page comes first,
        then the token's login lands on ``path`` (unless the test expects it ``refused``)."""
        page.goto(f"{self.url}{path}")
        assert "/console/login" in page.url
        page.fill("#token", token)
        page.click("#login")
        page.wait_for_load_state()
        assert refused or page.url.endswith(path), page.url

    def http(self, token: str | None = None, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        c = httpx.Client(base_url=self.url, headers=headers, timeout=30, **kw)
        self.clients.append(c)
        return c


def start_live(engine: Engine, db_url: str, redis_url: str, **settings: Any) -> Live:
    st = Settings(database_url=db_url, redis_url=redis_url, model_backoff_s=0, **settings)
    svc = build_state(st, engine=engine, dispatcher=KombuDispatcher(redis_url))
    server = LiveServer(create_app(svc)).start()
    live = Live(server, svc, engine)
    for scope in SCOPES:
        live.tokens[scope] = live.token(f"test-{scope}", (scope,))
    return live


def stop_live(live: Live) -> None:
    for c in live.clients:
        c.close()
    live.server.stop()


@pytest.fixture
def sqlite_engine(tmp_path: Any) -> Iterator[Engine]:
    eng = db.make_engine(migrated_sqlite_url(tmp_path / "svc.db"))  # a migrated copy
    yield eng
    eng.dispose()


@pytest.fixture
def live(sqlite_engine: Engine, redis_url: str) -> Iterator[Live]:
    """The service on SQLite and the session redis-server."""
    lv = start_live(sqlite_engine, str(sqlite_engine.url), redis_url)
    yield lv
    stop_live(lv)


@pytest.fixture
def live_db(engine: Engine, db_url: str, redis_url: str) -> Iterator[Live]:
    """The service on SQLite and on PostgreSQL (the SQL-facing tests)."""
    lv = start_live(engine, db_url, redis_url)
    yield lv
    stop_live(lv)


@pytest.fixture
def make_live(redis_url: str, sqlite_engine: Engine) -> Iterator[Callable[..., Live]]:
    """Build a service with other settings (rate limits, body limits)."""
    made: list[Live] = []

    def make(**settings: Any) -> Live:
        lv = start_live(sqlite_engine, str(sqlite_engine.url), redis_url, **settings)
        made.append(lv)
        return lv

    yield make
    for lv in made:
        stop_live(lv)
