"""``rsi runs replay RUN --inline``: re-run a recorded run from its stored inputs and compare the
decision (docs/operations/chaos.md#reproducible-runs).

:func:`replay_inline` copies the run's recorded inputs (``rsi_run_inputs``,
:mod:`rsi_worker.consolidate.inputs`) into a scratch database (SQLite in a temporary directory,
in-process coordination): the agent at the recorded consolidation state and harness version, the
recorded worlds with their recorded signals (each record checked against its digest), the agent's
harness versions and the regression lessons that existed when the run started. It runs one inline
consolidation there and compares its decision with the stored one (``decision_of``). With the sim
model the decision must be identical; a real model may differ, and the report shows how. Settings
that differ from the recorded ones are named in ``notes``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import fakeredis
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from rsi_common.config import Settings
from rsi_common.coord import Coordinator
from rsi_common.db import (
    AgentRow,
    HarnessRow,
    RegressionRow,
    RunRow,
    WorldRow,
    get_run,
    get_run_inputs,
    make_engine,
    session_factory,
    upgrade,
)
from rsi_common.db.run_inputs import canonical_digest
from rsi_common.errors import InvalidInput
from rsi_worker.consolidate.context import Deps, ModelFactory
from rsi_worker.consolidate.inline import SerialExecutor, consolidate_inline
from rsi_worker.consolidate.inputs import decision_of

__all__ = ["replay_inline"]


def _copy(src: Connection, dst: Connection, table: Any, where: Any, **override: Any) -> int:
    rows = [dict(r._mapping) for r in src.execute(sa.select(table).where(where))]
    for row in rows:
        row.update({k: (v(row) if callable(v) else v) for k, v in override.items()})
    if rows:
        dst.execute(sa.insert(table), rows)
    return len(rows)


def replay_inline(settings: Settings, run_id: str, models: ModelFactory) -> dict[str, Any]:
    """Re-run ``run_id`` from its recorded inputs (module docstring).

    Returns ``{"run_id", "inputs_digest", "same", "original", "replayed", "notes"}``.

    Raises:
        InvalidInput: no such run, the run recorded no inputs, or a recorded world is no longer
            stored or no longer has the recorded content.
    """
    engine = make_engine(settings.database_url)
    try:
        sessions = session_factory(engine)
        with sessions() as s:
            try:
                run = get_run(s, run_id)
            except KeyError:
                raise InvalidInput(f"no run {run_id!r}") from None
            row = get_run_inputs(s, run_id)
            if row is None:
                raise InvalidInput(f"run {run_id!r} recorded no inputs (it started no round, or predates "
                                   "them)")
            inputs, digest = dict(row.inputs), str(row.digest)
            original, started, kind = dict(run.result or {}), run.started_at, str(run.kind)
            s.commit()
        return _replay(settings, engine, run_id, inputs, digest, original, started, kind, models)
    finally:
        engine.dispose()


def _replay(settings: Settings, engine: sa.Engine, run_id: str, inputs: dict[str, Any], digest: str,
            original: dict[str, Any], started: Any, kind: str, models: ModelFactory) -> dict[str, Any]:
    agent_id = str(inputs["agent_id"])
    notes = []
    recorded = canonical_digest(inputs["settings"])
    if canonical_digest(settings.consolidation.model_dump(mode="json")) != recorded:
        notes.append("the consolidation settings differ from the recorded ones")
    if canonical_digest(settings.sim.model_dump(mode="json")) != canonical_digest(inputs["sim"]):
        notes.append("the simulator settings differ from the recorded ones")
    worlds: dict[str, dict[str, Any]] = inputs["worlds"]
    with tempfile.TemporaryDirectory(prefix="rsi-replay-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'replay.db'}"
        scratch = make_engine(url)
        try:
            upgrade(scratch)
            with engine.connect() as src, scratch.begin() as dst:
                _copy(src, dst, AgentRow.__table__, AgentRow.id == agent_id, state=inputs["state"],
                      current_version=inputs["start_version"], frozen=False, applied_fence=0)
                _copy(src, dst, HarnessRow.__table__, HarnessRow.agent_id == agent_id)
                copied = _copy(src, dst, WorldRow.__table__,
                               sa.and_(WorldRow.agent_id == agent_id, WorldRow.id.in_(sorted(worlds))),
                               signals=lambda r: worlds[r["id"]]["signals"], enqueued_at=None)
                if copied != len(worlds):
                    raise InvalidInput(f"run {run_id!r}: {len(worlds) - copied} recorded world(s) are no "
                                       "longer stored (retention)")
                for r in dst.execute(sa.select(WorldRow.id, WorldRow.world)):
                    if canonical_digest(r.world) != worlds[r.id]["digest"]:
                        raise InvalidInput(f"run {run_id!r}: world {r.id} no longer has the recorded content")
                _copy(src, dst, RegressionRow.__table__,
                      sa.and_(RegressionRow.agent_id == agent_id, RegressionRow.created_at < started))
            local = settings.model_copy(update={"database_url": url, "redis_url": None})
            coord = Coordinator(fakeredis.FakeRedis(server=fakeredis.FakeServer()), local.lease_s)
            deps = Deps(local, session_factory(scratch), coord, models, on_harness_change=lambda _a: None)
            lease = coord.try_begin(agent_id, str(inputs.get("io_id") or ""))
            assert lease is not None
            results = consolidate_inline(deps, lease, SerialExecutor(), max_reruns=0,
                                         force=bool(inputs.get("force")), kind=kind)
            with session_factory(scratch)() as s:
                stmt = sa.select(RunRow).where(RunRow.agent_id == agent_id)
                replayed_run = s.execute(stmt).scalars().first()
                replayed = dict(replayed_run.result or {}) if replayed_run else (
                    results[0].summary() if results else {})
        finally:
            scratch.dispose()
    before, after = decision_of(original), decision_of(replayed)
    return {"run_id": run_id, "inputs_digest": digest, "same": before == after, "original": before,
            "replayed": after, "notes": notes}
