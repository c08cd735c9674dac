"""Fixtures of the database contract tests: every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db import session_factory


@pytest.fixture
def factory(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)


def make_world(io: str, clock: float, interaction: str = "c1", **extra: Any) -> dict[str, Any]:
    """A minimal finalized world record (only the fields the repository reads)."""
    return {
        "schema": "rsi-world/1",
        "replayable": True,
        "io_id": io,
        "interaction_id": interaction,
        "clock": clock,
        "harness_version": None,
        "provider": "sim",
        "model": "sim-1",
        "plan": {"name": "agent"},
        "bytes": 100,
        **extra,
    }
