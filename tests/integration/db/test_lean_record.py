"""The lean record transaction (rsi_common/db/lean_tx.py,
docs/performance/record-path.md#the-lean-transaction) against ``engine.begin()`` with the Core
statements, on SQLite and PostgreSQL: the same
generated turns (repeats, a frozen agent, absent and ``None`` fields, non-ASCII, retention) store
byte-identical rows (every column cast to text, JSON included) and return the same answers; a value
the JSON serialiser refuses, a constraint the database refuses and a failure in the middle of the
transaction raise the same errors and store nothing."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from rsi_common.db import record as record_mod
from rsi_common.db.lean_tx import lean_begin
from rsi_common.db.record import record_world_turn
from tests.unit.perf.test_plain_record import _turns

Begin = Callable[[Engine], AbstractContextManager[Connection]]
_TABLES = (("rsi_agents", "id", {"created_at", "updated_at"}),
           ("rsi_worlds", "agent_id, io_id", {"id", "created_at", "enqueued_at"}),
           ("rsi_trajectories", "id", {"created_at"}))


def _core(engine: Engine) -> AbstractContextManager[Connection]:
    return engine.begin()


def _record_all(engine: Engine, begin: Begin, prefix: str, n: int = 60) -> list[Any]:
    """Record the generated turns under agent and trajectory ids starting with ``prefix``; the
    answers, then every stored row of those agents (ids and clock times out, prefix removed)."""
    answers: list[Any] = []
    for i, (agent, world, signals, trajectory) in enumerate(_turns(11, n)):
        if i == n // 2:
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE rsi_agents SET frozen = true WHERE id = :a"),
                             {"a": prefix + "a1"})
        if trajectory is not None:  # texts fit the shortest column (PostgreSQL checks lengths)
            trajectory = {**{k: v[:16] if isinstance(v, str) else v for k, v in trajectory.items()},
                          "trajectory_id": prefix + trajectory["trajectory_id"], "agent_id": prefix + agent}
        with begin(engine) as conn:
            agent_turn, stored = record_world_turn(conn, prefix + agent, world, signals, trajectory,
                                                   world_retention=5, trajectory_retention=7,
                                                   retention_every=4)
        answers.append((agent_turn, stored.io_id, stored.seq, stored.replayable, stored.new))
    return answers + _rows(engine, prefix)


def _rows(engine: Engine, prefix: str) -> list[Any]:
    out: list[Any] = []
    with engine.connect() as conn:
        for table, order, drop in _TABLES:
            cols = [c for c in sa.inspect(conn).get_columns(table) if c["name"] not in drop]
            text = ", ".join(f"CAST({c['name']} AS TEXT)" for c in cols)
            key = "id" if table == "rsi_agents" else "agent_id"
            like = {"p": prefix + "%"}
            where = f"FROM {table} WHERE {key} LIKE :p"
            result = conn.execute(sa.text(f"SELECT {text} {where} ORDER BY {order}"), like)
            for row in result:
                out.append((table, [str(v).replace(prefix, "", 1) if v is not None else None for v in row]))
            marked_only = " AND enqueued_at IS NOT NULL" if table == "rsi_worlds" else ""
            marked = conn.execute(sa.text(f"SELECT count(*) {where}{marked_only}"), like)
            out.append((table, "count", marked.scalar()))
    return out


def test_the_lean_transaction_stores_what_core_stores(engine: Engine,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    lean = _record_all(engine, lean_begin, "L-")
    assert record_mod._plain_statements(engine.dialect)  # the compiled statements ran
    monkeypatch.setattr(record_mod, "_plain_statements", lambda dialect: {})
    core = _record_all(engine, _core, "C-")
    assert lean == core
    n = 60
    assert any(a[4] is False for a in lean[:n]) and any(a[0].frozen for a in lean[:n])  # both rare paths ran
    assert any(row[0] == "rsi_worlds" and row[1] != "count" for row in lean[n:])


def _stored(engine: Engine, agent: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT (SELECT count(*) FROM rsi_agents WHERE id = :a)"
                                        " + (SELECT count(*) FROM rsi_worlds WHERE agent_id = :a)"),
                                {"a": agent}).scalar_one())


def _failure(engine: Engine, begin: Begin, agent: str, case: str) -> BaseException:
    world: dict[str, Any] = {"io_id": "io", "clock": 1.0, "interaction_id": "c"}
    trajectory: dict[str, Any] | None = None
    if case == "not json":
        world["bad"] = {1, 2}
    elif case == "constraint":
        trajectory = {"trajectory_id": f"t-{agent}", "agent_id": None}  # NOT NULL
    with pytest.raises(sa.exc.SQLAlchemyError) as info, begin(engine) as conn:
        record_world_turn(conn, agent, world, {}, trajectory, world_retention=None, trajectory_retention=None)
        if case == "midway":
            conn.execute(sa.text("SELECT * FROM no_such_table"))
    assert _stored(engine, agent) == 0  # the agent upsert was rolled back too
    return info.value


@pytest.mark.parametrize("case", ["not json", "constraint", "midway"])
def test_the_lean_transaction_fails_as_core_fails(engine: Engine, case: str) -> None:
    lean = _failure(engine, lean_begin, f"L-{case}", case)
    core = _failure(engine, _core, f"C-{case}", case)
    assert type(lean) is type(core) and type(lean.orig) is type(core.orig)  # type: ignore[attr-defined]
    first = [str(e.orig).splitlines()[0].replace("C-", "L-") for e in (lean, core)]  # type: ignore[attr-defined]
    assert first[0] == first[1]  # the rest of PostgreSQL's message holds the row, with its clock
    with lean_begin(engine) as conn:  # the pool is usable afterwards
        record_world_turn(conn, "after", {"io_id": "io", "clock": 1.0}, {}, None, world_retention=None,
                          trajectory_retention=None)
    assert _stored(engine, "after") == 2
