"""Helpers of the stranding tests (issue 11 class 3): poison rows written with raw SQL, one-shot
failure injection, and the Redis keys an agent leaves behind."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.config import Settings
from rsi_common.coord import Coordinator
from tests.support.pipeline import Stack

REQUEST = "Compare laptops: use search query=laptops"
GOOD = "Compare headphones: use search query=headphones"
LONE = "\ud800"


class InjectedFailure(RuntimeError):
    """The exception a test injects into a step."""


def agent_keys(client: redis.Redis, agent: str) -> set[str]:
    """Every ``rsi:{agent}:*`` key (decoded)."""
    return {k.decode() for k in client.scan_iter(match=f"rsi:{agent}:*")}


def run_keys(client: redis.Redis) -> set[str]:
    """Every ``rsi:run:*`` key (early-stop bounds, slots, cancel flags)."""
    return {k.decode() for k in client.scan_iter(match="rsi:run:*")}


def write_json(engine: Engine, column: str, world_id: str, text: str) -> None:
    """Overwrite one JSON column of a world row with ``text`` as given (no validation on our side;
    PostgreSQL's ``json`` type still checks the syntax)."""
    assert column in ("world", "signals")
    value = "CAST(:t AS json)" if engine.dialect.name == "postgresql" else ":t"
    with engine.begin() as conn:
        done = conn.execute(sa.text(f"UPDATE rsi_worlds SET {column} = {value} WHERE id = :id"),
                            {"t": text, "id": world_id})
        assert done.rowcount == 1


def escaped(obj: Any) -> str:
    """JSON text with every non-ASCII character escaped: a lone surrogate becomes ``\\ud800``."""
    return json.dumps(obj, ensure_ascii=True)


def nested(depth: int) -> str:
    """A JSON object nested ``depth`` levels deep."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def real_stack(db_url: str, redis_url: str, **settings: Any) -> Stack:
    """A :class:`Stack` on the test database and the real redis-server."""
    return Stack(Settings(database_url=db_url, model_backoff_s=0, **settings),
                 redis_client=redis.Redis.from_url(redis_url))


def once(fn: Callable[..., Any], before: Callable[[], None] | None = None) -> Callable[..., Any]:
    """``fn`` that raises :class:`InjectedFailure` on its first call (after running ``before``)."""
    calls = {"n": 0}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            if before is not None:
                before()
            raise InjectedFailure("injected failure (a step that raised)")
        return fn(*args, **kwargs)

    wrapped.calls = calls  # type: ignore[attr-defined]
    return wrapped


def turn_arrives(coord: Coordinator, agent: str, io: str) -> Callable[[], None]:
    """What a host does when a turn finishes during the run: the pending mark gets ``io``."""

    def arrive() -> None:
        assert coord.try_begin(agent, io) is None, "the run should hold the lease"

    return arrive
