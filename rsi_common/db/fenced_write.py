"""The applied case of a run's fenced final write in SQLAlchemy Core (``runs.final_write`` 7c;
docs/performance/consolidation.md#short-write-transactions).

The common outcome of a final write is *applied*: the state saved, the fence advanced, the run row
closed (and, when adopting, the harness row, ``current_version`` and the lessons). The ORM did it in
14 statements with the agent's state and the run's context decoded under the write turn and every
JSON document encoded there. Here: the run's and the agent's small columns are read (no JSON),
the documents are encoded before the first statement (:func:`encode_json`: before ``BEGIN`` when the
caller's session has not begun), and the writes are one ``UPDATE`` of the agent, one of the run
(``RETURNING finished_at``, the database clock) and, when adopting, one insert-if-absent of the
harness row plus the lessons (``add_regressions``). The rare outcomes (superseded, kept) stay on the
ORM path of ``runs.final_write``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from rsi_common.db.engine import EncodedJSON, encode_json
from rsi_common.db.models import AgentRow, HarnessRow, RunRow
from rsi_common.db.sqltypes import db_now

__all__ = ["Fenced", "applied_write", "encoded", "fenced_rows"]

_RUN_COLUMNS = ("id", "agent_id", "kind", "io_id", "status", "reason", "start_version", "adopted_version",
                "fence", "started_at", "finished_at")
_AGENT_COLUMNS = ("id", "current_version", "frozen", "applied_fence")


def encoded(value: Mapping[str, Any] | EncodedJSON | None) -> EncodedJSON | None:
    """A JSON document encoded (``None`` stays SQL ``NULL``)."""
    if value is None or isinstance(value, EncodedJSON):
        return value
    return encode_json(dict(value))


@dataclass
class Fenced:
    """The run's and the agent's small columns, read under the agent's lock (no JSON decoded)."""

    run: dict[str, Any]
    agent: dict[str, Any]


def fenced_rows(session: Session, run_id: str) -> Fenced | None:
    """The run's columns and its agent's, the agent row locked (PostgreSQL: ``FOR UPDATE``, then the
    run row re-read ``FOR UPDATE``, in the lock order agent → run; SQLite: the write lock is held
    from ``BEGIN IMMEDIATE``, so both are read in one joined ``SELECT``). ``None``: unknown run or
    agent."""
    runs, agents = RunRow.__table__, AgentRow.__table__
    run_cols = [runs.c[c] for c in _RUN_COLUMNS]
    if session.get_bind().dialect.name == "sqlite":  # one statement: the lock is the transaction's
        both = session.execute(
            sa.select(*run_cols, *(agents.c[c] for c in _AGENT_COLUMNS))
            .select_from(runs.join(agents, agents.c.id == runs.c.agent_id)).where(runs.c.id == run_id)
        ).one_or_none()
        if both is None:  # unknown run, or its agent is gone
            return None
        n = len(_RUN_COLUMNS)
        return Fenced(dict(zip(_RUN_COLUMNS, both[:n], strict=True)),
                      dict(zip(_AGENT_COLUMNS, both[n:], strict=True)))
    found = session.execute(sa.select(*run_cols).where(runs.c.id == run_id)).one_or_none()
    if found is None:
        return None
    run = dict(found._mapping)
    agent = session.execute(sa.select(*(agents.c[c] for c in _AGENT_COLUMNS))
                            .where(agents.c.id == run["agent_id"]).with_for_update()).one_or_none()
    if agent is None:
        return None
    if session.get_bind().dialect.name != "sqlite":  # the run row as of the agent lock
        run = dict(session.execute(sa.select(*run_cols).where(runs.c.id == run_id).with_for_update())
                   .one()._mapping)
    return Fenced(run, dict(agent._mapping))


def applied_write(
    session: Session,
    rows: Fenced,
    *,
    status: str,
    reason: str | None,
    result: EncodedJSON | None,
    state: EncodedJSON | None,
    error: EncodedJSON | None,
    adoption: tuple[str, EncodedJSON, EncodedJSON | None] | None,
) -> tuple[RunRow, AgentRow]:
    """Write the applied outcome (module docstring): ``adoption`` = (version, payload, harness
    summary). The lessons of an adoption are the caller's (``add_regressions``). Returns detached
    rows holding the columns written (``RunRow`` without ``params``/``drafts``; ``AgentRow``
    without ``state``)."""
    runs: Any = RunRow.__table__
    agents: Any = AgentRow.__table__
    harnesses: Any = HarnessRow.__table__
    run, agent = rows.run, rows.agent
    agent_values: dict[str, Any] = {"applied_fence": run["fence"]}
    if state is not None:
        agent_values["state"] = state
    if adoption is not None:
        agent_values["current_version"] = adoption[0]
    session.execute(agents.update().where(agents.c.id == agent["id"]).values(agent_values))
    if adoption is not None:
        version, payload, summary = adoption
        insert: Any = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
        session.execute(insert(harnesses).values(
            agent_id=agent["id"], version=version, parent_version=run["start_version"], payload=payload,
            run_id=run["id"], summary=summary, created_at=db_now(),
        ).on_conflict_do_nothing(index_elements=["agent_id", "version"]))
    adopted = adoption[0] if adoption is not None else None
    finished: datetime = session.execute(
        runs.update().where(runs.c.id == run["id"]).values(
            status=status, reason=reason, result=result, error=error, adopted_version=adopted,
            finished_at=db_now()).returning(runs.c.finished_at)).scalar_one()
    run_row = RunRow(**{**run, "status": status, "reason": reason, "adopted_version": adopted,
                        "finished_at": finished})
    agent_row = AgentRow(**{**agent, **{k: v for k, v in agent_values.items() if k != "state"}})
    return run_row, agent_row
