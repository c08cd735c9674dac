"""Fixtures of the ``rsi`` command tests: a migrated SQLite file database, the session
redis-server (flushed per test), the settings environment of a CLI process, and a runner that
invokes the real ``rsi`` app in-process (typer's CliRunner) with that environment."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner, Result

from rsi_common.config import Settings
from rsi_worker.cli import app
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.migrated import migrated_sqlite_url
from tests.support.pipeline import Stack

GOLDEN_WORLD = Path(__file__).resolve().parents[2] / "golden" / "world" / "rsi-world-1.json"
REQUEST = "Compare laptops: use search query=laptops"


@dataclass
class Cli:
    """Runs ``rsi ...`` in-process with a fixed ``RSI_*`` environment."""

    env: dict[str, str]

    def __call__(self, *args: str, env: dict[str, str] | None = None, input: str | None = None) -> Result:
        result = CliRunner().invoke(app, list(args), env={**self.env, **(env or {})}, input=input,
                                    catch_exceptions=False)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert "Traceback" not in result.output
        return result

    def json(self, *args: str, code: int = 0, **kw: Any) -> Any:
        result = self(*args, "--json", **kw)
        assert result.exit_code == code, (result.stdout, result.stderr)
        return json.loads(result.stdout)


@pytest.fixture
def db_file(tmp_path: Path) -> str:
    """A migrated SQLite file database (a copy of the migrated template: tests/support/migrated.py)."""
    return migrated_sqlite_url(tmp_path / "rsi.db")


@pytest.fixture
def cli(db_file: str, redis_url: str, tmp_path: Path) -> Cli:
    return Cli({"RSI_DATABASE_URL": db_file, "RSI_REDIS_URL": redis_url, "RSI_HOME": str(tmp_path / "home"),
                "RSI_MODEL_BACKOFF_S": "0", "COLUMNS": "160"})


@pytest.fixture
def stack(db_file: str, redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    """Live turns (sim model, real kernel) stored in the test database; inline consolidation."""
    settings = Settings(database_url=db_file, redis_url=redis_url, model_backoff_s=0, home=tmp_path / "home")
    s = Stack(settings, redis_client=redis.Redis.from_url(redis_url))
    yield s
    s.close()


def corrected(stack: Stack, agent: str) -> str:
    """A two-turn conversation whose second turn corrects the first; returns the correction's io."""
    stack.say(agent, "c1", REQUEST)
    turn = stack.say(agent, "c1", CORRECTION)
    assert turn.world is not None
    return str(turn.world["io_id"])


_TEMPLATE: dict[str, Any] = json.loads(GOLDEN_WORLD.read_text(encoding="utf-8"))


def world_line(agent: str, n: int, **world_fields: Any) -> dict[str, Any]:
    """One worlds-file line: the golden world as turn ``n`` of ``agent`` (conversation ``c<n // 5>``)."""
    w = copy.deepcopy(_TEMPLATE)
    w.pop("bytes", None)
    io, conv = f"io-{agent}-{n:03d}", f"c{n // 5}"
    w.update(agent_id=agent, io_id=io, interaction_id=conv, clock=1_700_000_000.0 + 60 * n, **world_fields)
    return {"agent_id": agent, "io_id": io, "interaction_id": conv, "seq": n % 5 + 1, "world": w,
            "signals": {"stars": 4} if n % 3 == 0 else {}}

