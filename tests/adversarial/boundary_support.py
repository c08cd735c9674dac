"""Builders and fixtures of the input-boundary tests (issue classes 3, 5, 6, 8).

Fixtures are imported by the test modules that use them (no conftest: the adversarial directory is
shared by several lanes). Database fixtures run on SQLite and PostgreSQL through ``engine``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient, redis_client
from rsi_common.config import Settings
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import RsiError

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "world" / "rsi-world-1.json"
TABLES = ("rsi_agents", "rsi_harnesses", "rsi_worlds", "rsi_runs", "rsi_replays", "rsi_trajectories")
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def golden_turn(**top: Any) -> dict[str, Any]:
    """The golden world as a host would hand it over (no computed fields), with ``top`` replaced."""
    w: dict[str, Any] = json.loads(GOLDEN.read_text("utf-8"))
    for key in ("bytes", "truncated", "images_dropped", "replayable"):
        w.pop(key)
    w.update(top)
    return w


def world_for(io: str, **top: Any) -> dict[str, Any]:
    """A host world for turn ``io`` (agent filled by the client)."""
    return golden_turn(io_id=io, agent_id="", **top)


def set_path(obj: Any, path: str, value: Any) -> Any:
    """Set ``a.b[0].c`` in ``obj`` (in place; a missing last key is created) and return ``obj``."""
    steps = [m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _STEP.finditer("." + path)]
    node = obj
    for step in steps[:-1]:
        node = node[step]
    node[steps[-1]] = value
    return obj


def nested(levels: int, leaf: Any = "x") -> Any:
    """``levels`` nested lists around ``leaf`` (built without recursion)."""
    out = leaf
    for _ in range(levels):
        out = [out]
    return out


def nested_dict(levels: int, leaf: Any = "x") -> Any:
    """``levels`` nested ``{"k": …}`` objects around ``leaf``."""
    out = leaf
    for _ in range(levels):
        out = {"k": out}
    return out


def row_counts(engine: Engine) -> dict[str, int]:
    """Rows of every rsi_ table."""
    with engine.connect() as conn:
        return {t: int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {t}")).scalar_one()) for t in TABLES}


def has_bad_chars(text: str) -> bool:
    """A lone surrogate or U+0000 in ``text``."""
    return any(ch == "\x00" or 0xD800 <= ord(ch) <= 0xDFFF for ch in text)


def assert_clean_message(exc: BaseException, *secrets: str) -> str:
    """The message of a boundary refusal: encodable (no bad character) and without the values."""
    msg = str(exc)
    msg.encode("utf-8")  # a message that cannot be printed is a crash waiting in a log handler
    for secret in secrets:
        assert secret not in msg, msg
    return msg


def only_project_errors(call: Callable[[], Any]) -> Any:
    """Run ``call``; return its result or the project error it raised. Anything else fails the test."""
    try:
        return call()
    except RsiError as exc:
        return exc


@pytest.fixture
def bclient(engine: Engine, redis_url: str, db_url: str) -> Iterator[RsiClient]:
    """A host client on the test database (SQLite and PostgreSQL) and the session redis-server."""
    rc: redis.Redis = redis_client(redis_url)
    client = RsiClient(Settings(database_url=db_url, redis_url=redis_url), engine=engine, redis=rc,
                       dispatcher=RecordingDispatcher())
    yield client
    client.close()
    rc.close()


def stored_world(engine: Engine, agent: str, io: str) -> dict[str, Any]:
    """The stored world record of one turn, read back through a fresh connection."""
    from rsi_common.db import WorldRow

    with engine.connect() as conn:
        row = conn.execute(sa.select(WorldRow.world).where(WorldRow.agent_id == agent,
                                                           WorldRow.io_id == io)).scalar_one()
    return copy.deepcopy(dict(row))
