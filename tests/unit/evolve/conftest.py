"""An evolve stack for unit tests: SQLite, the sim model, a small generated suite."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import rsi_worker.roles  # noqa: F401 - registers the sim's role behaviours
from rsi_common.config import Settings
from rsi_common.db import make_engine, session_factory, upgrade
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse
from rsi_common.math import RRSIParams
from rsi_worker.bench.evolve_suite import sim_suite
from rsi_worker.consolidate import default_models
from rsi_worker.evolve.config import EvolveConfig
from rsi_worker.evolve.engine import EvolveEnv
from rsi_worker.evolve.store import Store

Wrap = Callable[[str, ModelClient], ModelClient]


class Recording:
    """A client that records every request it is sent (per role) and may be wrapped."""

    def __init__(
        self, inner: ModelClient, role: str, log: list[tuple[str, ModelRequest]], lock: threading.Lock
    ) -> None:
        self.inner, self.role, self.log, self.lock = inner, role, log, lock
        self.provider, self.model = inner.provider, inner.model

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self.lock:
            self.log.append((self.role, request))
        return self.inner.complete(request)


@dataclass
class EvolveStack:
    """SQLite database, sim models (recorded), a stored suite."""

    tmp: Path
    wrap: Wrap | None = None
    requests: list[tuple[str, ModelRequest]] = field(default_factory=list)
    url: str = ""
    """An empty database to migrate (the ``db_url`` fixture: SQLite or PostgreSQL); default a SQLite
    file in ``tmp``."""

    def __post_init__(self) -> None:
        self.settings = Settings(database_url=self.url or f"sqlite:///{self.tmp / 'rsi.db'}")
        self.engine = make_engine(self.settings.database_url)
        upgrade(self.engine)
        self.sessions = session_factory(self.engine)
        self.store = Store(self.sessions)
        self.suite = sim_suite("s", n_tasks=4, n_heldout=2)
        self.store.save_suite(self.suite)
        base = default_models(self.settings)
        lock = threading.Lock()

        def models(provider: str, model: str, role: str) -> ModelClient:
            client = base(provider, model, role)
            if self.wrap is not None:
                client = self.wrap(role, client)
            return Recording(client, role, self.requests, lock)

        self.env = EvolveEnv(self.sessions, models, self.settings)

    def create(self, name: str = "r", **config: Any) -> str:
        params = config.pop("params", {})
        cfg = EvolveConfig(params=RRSIParams(**{"T": 2, "k": 1, **params}), trial_parallel=1, **config)
        self.store.create(name, self.suite.name, cfg)
        return name


@pytest.fixture
def stack(tmp_path: Path) -> Any:
    s = EvolveStack(tmp_path)
    yield s
    s.engine.dispose()
