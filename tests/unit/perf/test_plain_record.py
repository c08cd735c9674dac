"""The record path's compiled driver SQL (rsi_common/db/plain_sql.py,
docs/performance/record-path.md#sqlalchemys-share) against the Core statements it replaces: the same
generated turns recorded through each on its own SQLite file store byte-identical rows (JSON text
included) and return the same answers; a value a bind processor refuses fails the same way; and
PostgreSQL's dialect compiles them with psycopg's named placeholders."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from rsi_common.db import make_engine, upgrade
from rsi_common.db import record as record_mod
from rsi_common.db.plain_sql import plain
from rsi_common.db.record import _TRAJECTORY_FIELDS, record_world_turn

_TEXTS = ["plain", "", "ünïcödé ✓", "line\nbreak \"quoted\" \\ back", "😀 emoji", "x" * 300, "\u2028sep"]


def _world(rng: random.Random, io: str, clock: float) -> dict[str, Any]:
    """A finalized-looking world with optional fields present or absent (the statements do not
    validate; the record path did before)."""
    w: dict[str, Any] = {"schema": "rsi-world/1", "io_id": io, "clock": clock,
                         "plan": {"name": rng.choice(_TEXTS), "kwargs": {"n": rng.randint(0, 9)}},
                         "input": [{"role": "user", "content": rng.choice(_TEXTS)}],
                         "outcome": {"final_text": rng.choice(_TEXTS), "score": rng.random()},
                         "bytes": rng.randint(0, 5000)}
    if rng.random() < 0.7:
        w["interaction_id"] = f"c{rng.randint(0, 2)}"
    for key in ("harness_version", "model", "provider"):
        if rng.random() < 0.6:
            w[key] = rng.choice(["v1", "m-1", "prov", None])
    if rng.random() < 0.3:
        w["replayable"] = rng.random() < 0.5
    return w


def _trajectory(rng: random.Random, n: int, agent: str, io: str) -> dict[str, Any] | None:
    if rng.random() < 0.15:
        return None
    # trajectory ids repeat: ON CONFLICT DO NOTHING
    t: dict[str, Any] = {"trajectory_id": f"t-{n % 40}", "agent_id": agent, "io_id": io}
    for key in _TRAJECTORY_FIELDS:
        if rng.random() < 0.5 or key == "agent_id":  # the agent's id: the caller fills it
            continue
        if key in ("steps", "usage_by_purpose"):
            t[key] = rng.choice([{}, {"model_calls": rng.randint(0, 5)}, None])
        elif key in ("components_fired", "params_read"):
            t[key] = rng.choice([[], ["a", "ü"], None])
        elif key in ("policy_tokens", "final_text_chars", "world_bytes"):
            t[key] = rng.choice([0, rng.randint(1, 10**6), None])
        elif key == "error":
            t[key] = rng.choice(["boom " * 100, None, ValueError("bad")])
        else:
            t[key] = rng.choice([*_TEXTS, None])
    return t


def _turns(seed: int, n: int) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any] | None]]:
    rng = random.Random(seed)
    for i in range(n):
        io = f"io-{rng.randint(0, n // 2)}"  # repeated io_ids: the idempotent path
        agent = f"a{rng.randint(0, 3)}"
        yield agent, _world(rng, io, float(i)), {"stars": rng.randint(0, 5)}, _trajectory(rng, i, agent, io)


def _record_all(url: str, seed: int, n: int) -> list[Any]:
    engine = make_engine(url)
    upgrade(engine)
    answers = []
    try:
        for i, (agent, world, signals, trajectory) in enumerate(_turns(seed, n)):
            if i == n // 2:
                with engine.begin() as conn:
                    conn.exec_driver_sql("UPDATE rsi_agents SET frozen = 1 WHERE id = 'a1'")
            with engine.begin() as conn:
                agent_turn, stored = record_world_turn(conn, agent, world, signals, trajectory,
                                                       world_retention=6, trajectory_retention=9,
                                                       retention_every=4)
            answers.append((agent_turn, stored.io_id, stored.seq, stored.replayable, stored.new))
        answers.extend(_rows(engine))
    finally:
        engine.dispose()
    return answers


def _rows(engine: sa.Engine) -> list[Any]:
    """Every stored row as the driver returns it (JSON as stored text), ids and clock times out."""
    out: list[Any] = []
    with engine.connect() as conn:
        for table, order, drop in (("rsi_agents", "id", {"created_at", "updated_at"}),
                                   ("rsi_worlds", "agent_id, io_id", {"id", "created_at", "enqueued_at"}),
                                   ("rsi_trajectories", "id", {"created_at"})):
            result = conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY {order}")
            names = list(result.keys())
            for row in result:
                out.append((table, {k: v for k, v in zip(names, row, strict=True) if k not in drop}))
            marked = conn.exec_driver_sql(f"SELECT count(*) FROM {table} WHERE "
                                          + ("enqueued_at IS NOT NULL" if table == "rsi_worlds" else "1"))
            out.append((table, "count", marked.scalar()))
    return out


def test_compiled_driver_sql_stores_what_the_core_statements_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed, n = 7, 80
    fast = _record_all(f"sqlite:///{tmp_path / 'fast.db'}", seed, n)
    engine = make_engine(f"sqlite:///{tmp_path / 'probe.db'}")
    assert set(record_mod._plain_statements(engine.dialect)) == {"upsert", "world", "trajectory_all",
                                                                 "retain_worlds", "retain_trajectories"}
    engine.dispose()
    monkeypatch.setattr(record_mod, "_plain_statements", lambda dialect: {})
    core = _record_all(f"sqlite:///{tmp_path / 'core.db'}", seed, n)
    assert fast == core
    assert any(a[4] is False for a in fast[:n]) and any(a[0].frozen for a in fast[:n])  # both rare paths ran


def test_a_value_the_bind_processor_refuses_fails_as_in_core(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def attempt() -> BaseException:
        engine = make_engine(f"sqlite:///{tmp_path / f'e{len(list(tmp_path.iterdir()))}.db'}")
        upgrade(engine)
        try:
            with pytest.raises(sa.exc.StatementError) as info, engine.begin() as conn:
                record_world_turn(conn, "a", {"io_id": "io", "clock": 1.0, "bad": {1, 2}}, {}, None,
                                  world_retention=None, trajectory_retention=None)
            with engine.connect() as conn:
                assert conn.exec_driver_sql("SELECT count(*) FROM rsi_worlds").scalar() == 0
            return info.value
        finally:
            engine.dispose()

    fast = attempt()
    monkeypatch.setattr(record_mod, "_plain_statements", lambda dialect: {})
    core = attempt()
    assert type(fast) is type(core) and type(fast.orig) is type(core.orig)
    assert "not JSON serializable" in str(fast) and "not JSON serializable" in str(core)


def test_postgresql_compiles_the_steady_statements_with_named_parameters() -> None:
    dialect = postgresql.psycopg.dialect()  # type: ignore[attr-defined,unused-ignore]
    statements = record_mod._statements("postgresql")
    for name in ("upsert", "world", "trajectory_all"):
        compiled = plain(statements[name], dialect)
        assert compiled is not None and compiled.names is not None
        assert all(f"%({n})s" in compiled.sql for n in compiled.names)  # every slot has its placeholder
    world = plain(statements["world"], dialect)
    assert world is not None and "%(world)s::JSON" in world.sql
