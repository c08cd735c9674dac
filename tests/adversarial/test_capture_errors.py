"""Class 3 of issue 11: a world-capture or recording error never loses the host's answer.

``RsiClient.run_turn`` on SQLite and PostgreSQL with a real redis-server: the answer always comes
back; ``recorded`` says whether the turn was stored and ``record_error`` why not, without quoting
the offending value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common import db
from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.coord import fence_key, lease_key
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import InvalidInput
from rsi_common.kernel import ToolDef, TurnPlan, run_turn
from rsi_common.kernel.capture import WorldCapture
from rsi_common.llm import make_client
from rsi_common.stored import first_problem
from tests.adversarial.stranding import LONE, agent_keys

pytestmark = pytest.mark.timeout(60)
A = "agent-1"
SECRET = "sk-" + "Zr4q" * 8
ASK = "Use get_sales region=EU then summarise."


@pytest.fixture
def client(db_url: str, redis_url: str, engine: Engine) -> Iterator[RsiClient]:
    rclient = redis.Redis.from_url(redis_url)
    c = RsiClient(Settings(database_url=db_url, redis_url=redis_url, model_backoff_s=0, record_retry_s=0),
                  engine=engine,
                  redis=rclient, dispatcher=RecordingDispatcher())
    yield c
    c.close()
    rclient.close()


def plan(result_text: str, io: str = "io-1") -> TurnPlan:
    """A turn whose one tool answers ``result_text``."""
    schema = {"type": "object", "properties": {"region": {"type": "string"}}}
    tool = ToolDef("get_sales", "Sales figures by region.", schema, executor=lambda _inp: result_text)
    return TurnPlan(input=ASK, agent_id=A, io_id=io, interaction_id="c1", provider="sim", model="sim-1",
                    tools=[tool], clock=1_700_000_000.0)


def sim() -> Any:
    return make_client("sim", "sim-1", Settings(), role="policy")


def stored_text(engine: Engine) -> str:
    """Every stored row of every rsi_ table, as one text (for leak checks)."""
    out = []
    with engine.connect() as conn:
        for table in ("rsi_agents", "rsi_worlds", "rsi_runs", "rsi_trajectories"):
            out += [json.dumps(dict(r), default=str) for r in conn.execute(sa.text(f"SELECT * FROM {table}"))
                    .mappings()]
    return "\n".join(out)


def worlds(engine: Engine) -> list[db.WorldRow]:
    with db.session_factory(engine)() as s:
        return list(s.execute(sa.select(db.WorldRow)).scalars())


def test_a_lone_surrogate_in_a_tool_result_keeps_the_answer_and_the_turn(client: RsiClient,
                                                                          engine: Engine) -> None:
    """The character is replaced by U+FFFD before the model sees it: the model answers and the
    world, holding what the model saw, is recorded."""
    result = client.run_turn(A, plan(f"region: EU\nrevenue: 12 {LONE} EUR"), sim())
    assert result.status == "completed" and "EU" in result.answer
    assert (result.recorded, result.record_error) == (True, "")
    (row,) = worlds(engine)
    (call,) = row.world["tools"]["calls"]
    assert call["content"] == "region: EU\nrevenue: 12 \ufffd EUR"
    assert first_problem(row.world) is None
    assert agent_keys(client.redis, A) == {lease_key(A), fence_key(A)}  # its run is enqueued


def test_a_credential_in_a_tool_result_keeps_the_answer_and_never_stores_the_secret(
    client: RsiClient, engine: Engine
) -> None:
    assignment = "api" + "_key = '" + SECRET + "'"  # built here: no credential-shaped literal in the file
    result = client.run_turn(A, plan(f"region: EU\n{assignment}"), sim())
    assert result.status == "completed" and result.answer
    assert SECRET not in result.record_error and SECRET not in json.dumps(result.events)
    assert SECRET not in stored_text(engine)
    # a tool result is a world field: the world is refused (docs/security/credentials.md), the answer stays
    assert not result.recorded and result.record_error.startswith("world refused: CredentialError")
    assert worlds(engine) == [] and any(e["type"] == "world.refused" for e in result.events)


def test_a_capture_bug_keeps_the_answer(
    client: RsiClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: WorldCapture, outcome: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError(f"capture bug near {SECRET}")

    monkeypatch.setattr(WorldCapture, "finish", broken)
    bare = run_turn(plan("region: EU"), None, sim())  # the kernel alone: no exception either
    assert bare.status == "completed" and bare.world is None and bare.recorded is False
    assert bare.record_error == "world not captured: RuntimeError"
    result = client.run_turn(A, plan("region: EU", io="io-2"), sim())
    assert result.answer == bare.answer and result.world is None
    assert (result.recorded, result.record_error) == (False, "world not captured: RuntimeError")
    assert [e for e in result.events if e["type"] == "world.capture_error"] == [
        {"type": "world.capture_error", "iteration": 1, "error": "RuntimeError"}]
    assert worlds(engine) == [] and SECRET not in stored_text(engine)
    with db.session_factory(engine)() as s:
        assert len(db.trajectories(s, A)) == 1  # the content-free trajectory is still recorded
    assert agent_keys(client.redis, A) == set()  # no world, no trigger: nothing to strand


def test_a_database_error_while_recording_keeps_the_answer(client: RsiClient, engine: Engine,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def down(_conn: Any, _cursor: Any, statement: str, *_a: Any) -> None:
        if statement.lstrip().startswith("INSERT INTO rsi_worlds"):  # the world's insert fails
            raise sa.exc.OperationalError("INSERT INTO rsi_worlds ...", {"world": SECRET}, Exception("gone"))

    sa.event.listen(engine, "before_cursor_execute", down)
    try:
        result = client.run_turn(A, plan("region: EU"), sim())
    finally:
        sa.event.remove(engine, "before_cursor_execute", down)
    assert result.status == "completed" and result.answer
    assert (result.recorded, result.record_error) == (False, "not recorded: database error OperationalError")
    assert agent_keys(client.redis, A) == set()


def test_invalid_input_while_recording_keeps_the_answer(
    client: RsiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rsi_common.client as client_mod

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise InvalidInput(f"world.input: longer than the limit of 10 characters ({SECRET})")

    monkeypatch.setattr(client_mod, "parse_turn", refuse)
    result = client.run_turn(A, plan("region: EU"), sim())
    assert result.status == "completed" and result.answer and result.recorded is False
    assert result.record_error == "not recorded: [withheld: looks like a credential]"
    limit = "world.input: longer than the limit of 10 characters"

    def refuse_plainly(*_a: Any, **_k: Any) -> Any:
        raise InvalidInput(limit)

    monkeypatch.setattr(client_mod, "parse_turn", refuse_plainly)
    again = client.run_turn(A, plan("region: EU", io="io-2"), sim())
    assert again.record_error == f"not recorded: InvalidInput: {limit}"


def test_a_clean_turn_is_recorded(client: RsiClient, engine: Engine) -> None:
    result = client.run_turn(A, plan("region: EU\nrevenue: 12 EUR"), sim())
    assert (result.recorded, result.record_error) == (True, "") and len(worlds(engine)) == 1
