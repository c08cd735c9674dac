"""Fixtures of the runtime's unit tests: a migrated SQLite file and an in-process fakeredis (Lua)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db import make_engine, session_factory, upgrade


@pytest.fixture(scope="module")
def _template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated database per module, copied per test (migrating costs ~0.5 s)."""
    path = tmp_path_factory.mktemp("rt") / "template.db"
    eng = make_engine(f"sqlite:///{path}")
    upgrade(eng)
    eng.dispose()
    return path


@pytest.fixture
def engine(_template: Path, tmp_path: Path) -> Iterator[Engine]:
    target = tmp_path / "rsi.db"
    target.write_bytes(_template.read_bytes())
    eng = make_engine(f"sqlite:///{target}")
    yield eng
    eng.dispose()


@pytest.fixture
def factory(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)


@pytest.fixture
def fake_redis() -> Any:
    return fakeredis.FakeRedis()
