"""Issue class 8: SQLite and PostgreSQL accept and refuse exactly the same input.

Every test runs on both databases (``engine``/``db_url``) and asserts one outcome; an id, a column
value or a character the boundary refuses never reaches the database, so PostgreSQL never raises
``DataError`` where SQLite would have stored the value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common import db
from rsi_common.boundary import (
    MAX_HARNESS_VERSION_CHARS,
    MAX_ID_CHARS,
    MAX_INT32,
    MAX_MODEL_CHARS,
    MAX_PROVIDER_CHARS,
    REPLACEMENT_CHAR,
)
from rsi_common.client import RsiClient
from rsi_common.db import HarnessRow, TrajectoryRow, WorldRow, session_factory
from rsi_common.errors import InputLimitError, InvalidInput, WorldLimitError
from rsi_common.world import finalize_world
from tests.adversarial import attacks
from tests.adversarial.boundary_support import (
    assert_clean_message,
    bclient,
    row_counts,
    set_path,
    stored_world,
    world_for,
)

__all__ = ["bclient"]

pytestmark = pytest.mark.timeout(120)
BAD_IDS = attacks.section("identifiers")
GOOD_IDS = attacks.section("identifiers_ok")


def _agent_calls(client: RsiClient, bad: str) -> dict[str, Callable[[], Any]]:
    return {
        "record_turn": lambda: client.record_turn(bad, {"world": world_for("turn-1")}),
        "record_signals": lambda: client.record_signals(bad, "turn-1", {"stars": 3}),
        "current_harness": lambda: client.current_harness(bad),
        "agent": lambda: client.agent(bad),
        "lineage": lambda: client.lineage(bad),
        "runs": lambda: client.runs(bad),
        "freeze": lambda: client.freeze(bad),
        "rollback": lambda: client.rollback(bad, None),
        "clone to": lambda: client.clone("agent-1", bad),
        "clone from": lambda: client.clone(bad, "agent-2"),
    }


@pytest.mark.parametrize("entry", BAD_IDS, ids=[e["name"] for e in BAD_IDS])
def test_bad_agent_ids_are_refused_before_the_database(bclient: RsiClient, engine: Engine,
                                                       entry: dict[str, Any]) -> None:
    bclient.record_turn("agent-1", {"world": world_for("turn-1")})
    before = row_counts(engine)
    for name, call in _agent_calls(bclient, entry["text"]).items():
        with pytest.raises(InputLimitError) as info:
            call()
        msg = assert_clean_message(info.value)
        assert msg.startswith("agent_id: ") and "not a valid id" in msg, (name, msg)
        if entry["text"].strip():
            assert entry["text"] not in msg
    assert row_counts(engine) == before


_WORLD_ID_CASES = [(e, f) for f in ("io_id", "interaction_id", "state.session_id") for e in BAD_IDS
                   if e["text"] or f == "io_id"]  # an empty conversation or session id means none


@pytest.mark.parametrize(("entry", "field"), _WORLD_ID_CASES,
                         ids=[f"{f}-{e['name']}" for e, f in _WORLD_ID_CASES])
def test_bad_host_ids_in_a_world_are_refused(bclient: RsiClient, engine: Engine, entry: dict[str, Any],
                                             field: str) -> None:
    before = row_counts(engine)
    world = set_path(world_for("turn-1"), field, entry["text"])
    with pytest.raises(InvalidInput) as info:  # InputLimitError; an empty io_id: "needs the turn id"
        bclient.record_turn("agent-1", {"world": world, "io_id": None})
    msg = assert_clean_message(info.value)
    assert msg.startswith(f"{field}: ") or msg.startswith("io_id: "), msg
    assert row_counts(engine) == before
    with pytest.raises(InputLimitError, match=r"^io_id: "):
        bclient.record_signals("agent-1", entry["text"] or "\x00", {"stars": 1})


@pytest.mark.parametrize("entry", GOOD_IDS, ids=[e["name"] for e in GOOD_IDS])
def test_good_ids_are_stored_and_read_back_unchanged(bclient: RsiClient, engine: Engine,
                                                    entry: dict[str, Any]) -> None:
    ident = entry["text"]
    world = world_for(ident, interaction_id=ident)
    set_path(world, "state.session_id", ident)
    rec = bclient.record_turn(ident, {"world": world, "signals": {"stars": 4}})
    assert rec.world_id is not None and rec.io_id == ident
    bclient.record_signals(ident, ident, {"comment": "ok"})
    assert bclient.agent(ident).agent_id == ident and bclient.freeze(ident).frozen
    other = ident[:-1] + ("Y" if ident.endswith("Z") else "Z")
    assert bclient.clone(ident, other).current_version is None
    stored = stored_world(engine, ident, ident)
    assert (stored["agent_id"], stored["io_id"], stored["interaction_id"]) == (ident, ident, ident)


def test_the_repository_refuses_before_sql(engine: Engine) -> None:
    sessions = session_factory(engine)
    for bad in ("a\x00b", "x" * 300, "\ud800", ""):
        for call in (db.ensure_agent, db.get_agent, db.lock_agent):
            with pytest.raises(InputLimitError), sessions.begin() as s:
                call(s, bad)
    with sessions.begin() as s:
        db.ensure_agent(s, "agent-1")
    world = finalize_world(dict(world_for("turn-1"), agent_id="agent-1"))
    for io in ("x" * 300, "t\x00"):
        with pytest.raises(InputLimitError, match=r"^io_id: not a valid id"), sessions.begin() as s:
            db.save_world(s, "agent-1", world, io_id=io)
    for version in ("v\x00", "v" * (MAX_HARNESS_VERSION_CHARS + 1)):
        with pytest.raises(InputLimitError, match=r"^version: "), sessions.begin() as s:
            db.get_harness(s, "agent-1", version)
    assert row_counts(engine)["rsi_worlds"] == 0


def test_version_and_run_arguments_are_bounded(bclient: RsiClient) -> None:
    bclient.record_turn("agent-1", {"world": world_for("turn-1")})
    for call in (lambda: bclient.rollback("agent-1", "sha256:\x00"),
                 lambda: bclient.pin("agent-1", "v" * 101),
                 lambda: bclient.diff("agent-1", None, "\ud800"),
                 lambda: bclient.progress("r\x00"),
                 lambda: bclient.progress("r" * 65)):
        with pytest.raises(InputLimitError):
            call()


@pytest.mark.parametrize(("field", "width"), [("provider", MAX_PROVIDER_CHARS), ("model", MAX_MODEL_CHARS),
                                              ("harness_version", MAX_HARNESS_VERSION_CHARS)])
def test_world_columns_fit_on_both_databases(bclient: RsiClient, engine: Engine, field: str,
                                             width: int) -> None:
    rec = bclient.record_turn("agent-1", {"world": world_for("turn-1", **{field: "m" * width})})
    assert rec.world_id is not None
    with engine.connect() as conn:
        assert conn.execute(sa.select(getattr(WorldRow, field))).scalar_one() == "m" * width
    before = row_counts(engine)
    with pytest.raises(WorldLimitError, match=rf"^{field}: longer than {width} characters"):
        bclient.record_turn("agent-1", {"world": world_for("turn-2", **{field: "m" * (width + 1)})})
    with pytest.raises(WorldLimitError, match=rf"^{field}: contains a control character"):
        bclient.record_turn("agent-1", {"world": world_for("turn-3", **{field: "m\x00"})})
    assert row_counts(engine) == before


def test_trajectory_integers_fit_postgresql_integer(bclient: RsiClient, engine: Engine) -> None:
    trajectory = {"trajectory_id": "t-1", "policy_tokens": MAX_INT32, "world_bytes": 0, "final_text_chars": 1}
    bclient.record_turn("agent-1", {"world": world_for("turn-1"), "trajectory": trajectory})
    with engine.connect() as conn:
        assert conn.execute(sa.select(TrajectoryRow.policy_tokens)).scalar_one() == MAX_INT32
    before = row_counts(engine)
    with pytest.raises(InputLimitError, match=r"^trajectory\.policy_tokens: must be an integer from"):
        bclient.record_turn("agent-1", {"world": world_for("turn-2"),
                                        "trajectory": dict(trajectory, trajectory_id="t-2",
                                                           policy_tokens=MAX_INT32 + 1)})
    assert row_counts(engine) == before


@pytest.mark.parametrize("text", ["nul \x00 inside", "lone \ud800 surrogate", "both \udfff\x00"])
def test_content_characters_are_stored_identically(bclient: RsiClient, engine: Engine, text: str) -> None:
    world = world_for("turn-1", input=text)
    set_path(world, "state.metadata.note", text)
    bclient.record_turn("agent-1", {"world": world})
    stored = stored_world(engine, "agent-1", "turn-1")
    expected = finalize_world(dict(world, agent_id="agent-1"))
    assert stored == expected
    assert stored["input"] == "".join(REPLACEMENT_CHAR if c in "\x00\ud800\udfff" else c for c in text)


def test_limits_match_the_columns() -> None:
    cols = WorldRow.__table__.c
    assert cols.provider.type.length == MAX_PROVIDER_CHARS and cols.model.type.length == MAX_MODEL_CHARS
    assert cols.harness_version.type.length == MAX_HARNESS_VERSION_CHARS
    assert HarnessRow.__table__.c.version.type.length == MAX_HARNESS_VERSION_CHARS
    for col in (cols.agent_id, cols.io_id, cols.interaction_id, db.AgentRow.__table__.c.id):
        assert col.type.length >= MAX_ID_CHARS
    assert TrajectoryRow.__table__.c.id.type.length == 64
