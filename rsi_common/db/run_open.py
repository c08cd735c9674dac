"""A consolidation run's row opened with its context in one ``INSERT`` (docs/algorithm/consolidation.md §3.3
step 1; docs/performance/consolidation.md#short-write-transactions).

:func:`open_run_row` is :func:`~rsi_common.db.runs.start_run` for a caller that stores the run's
context at once: the agent row locked reading ``current_version`` only, the row of ``(agent,
fence)`` looked up by its small columns (no JSON decoded), and a new row inserted with its context —
built from the start version read under the lock — in the same statement (the ORM path inserted
the row, read it back and then updated its context). The run retention follows, as in ``start_run``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rsi_common.db.agents import lock_agent_version
from rsi_common.db.engine import encode_json
from rsi_common.db.models import RunRow
from rsi_common.db.runs import retain_runs
from rsi_common.db.sqltypes import db_now

__all__ = ["OpenedRun", "open_run_row"]


@dataclass(frozen=True)
class OpenedRun:
    """The run row of ``(agent, fence)`` after :func:`open_run_row`."""

    id: str
    status: str
    start_version: str | None
    has_params: bool
    """Whether the row holds a context (always, for a row this call inserted)."""
    created: bool


def open_run_row(
    session: Session,
    agent_id: str,
    *,
    fence: int,
    io_id: str | None,
    kind: str,
    run_id: str,
    params: Callable[[str | None], Mapping[str, Any]],
    retention: int | None = 200,
) -> OpenedRun:
    """Open the ``running`` row of the run holding ``fence`` with ``params(start_version)`` as its
    context, or return the stored row of ``(agent, fence)`` unchanged (a redelivered task: whatever
    its status; ``params`` is then not called). Inside the caller's transaction; never commits.

    Raises:
        UnknownAgentError: no such agent.
        InputLimitError: the agent id breaks the id grammar.
    """
    start_version = lock_agent_version(session, agent_id)
    runs: Any = RunRow.__table__
    found = session.execute(
        sa.select(runs.c.id, runs.c.status, runs.c.start_version, runs.c.params.is_not(None))
        .where(runs.c.agent_id == agent_id, runs.c.fence == fence)).one_or_none()
    if found is not None:
        return OpenedRun(str(found[0]), str(found[1]), found[2], bool(found[3]), False)
    context = encode_json(dict(params(start_version)))
    session.execute(sa.insert(runs).values(
        id=run_id, agent_id=agent_id, kind=kind, io_id=io_id, status="running", start_version=start_version,
        fence=fence, params=context, started_at=db_now()))
    if retention is not None:
        retain_runs(session, agent_id, retention)
    return OpenedRun(run_id, "running", start_version, True, True)
