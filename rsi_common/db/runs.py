"""Run rows: open (idempotent per fence), round parameters and drafts, the fenced final write,
listing, retention and the sweeper's queries.

Every function runs inside the caller's transaction and never commits. Writers of a run row
lock its agent first (:func:`~rsi_common.db.agents.lock_agent`) and re-read the run row
``FOR UPDATE``; the sweeper's :func:`mark_interrupted` is a conditional ``UPDATE … WHERE status =
'running'``. So a final write and a sweep of the same run never both win.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import instance_state

from rsi_common.db.agents import lock_agent, lock_agent_version
from rsi_common.db.engine import EncodedJSON
from rsi_common.db.fenced_write import Fenced, applied_write, encoded, fenced_rows
from rsi_common.db.models import RUN_STATUSES, AgentRow, ReplayRow, RunRow
from rsi_common.db.regressions import add_regressions
from rsi_common.db.sqltypes import db_ago, db_now
from rsi_common.errors import InvalidInput
from rsi_common.stored import ErrorRecord

__all__ = [
    "FROZEN_REASON",
    "KEPT_REASON",
    "SUPERSEDED_REASON",
    "Adoption",
    "FinalOutcome",
    "FinalWrite",
    "fence_status",
    "final_write",
    "finish_run",
    "get_run",
    "mark_interrupted",
    "new_run_id",
    "retain_runs",
    "run_id_at_fence",
    "running_runs",
    "runs",
    "set_run_drafts",
    "set_run_params",
    "skip_run",
    "stale_runs",
    "start_run",
]

SUPERSEDED_REASON = "superseded"
KEPT_REASON = "the harness changed during the run; not adopted"
FROZEN_REASON = "the agent was frozen during the run; not adopted"
"""A user who freezes an agent expects no change: an adoption found frozen is discarded like a
rollback's (project decision)."""
FinalOutcome = Literal["written", "adopted", "kept", "superseded"]
_FINAL_STATUSES = ("recorded", "kept", "failed", "adopted", "skipped")
_NEWEST = (RunRow.started_at.desc(), sa.func.coalesce(RunRow.fence, 0).desc(), RunRow.id.desc())


def new_run_id() -> str:
    """``"run_" + 24 lowercase hex`` (random)."""
    return "run_" + secrets.token_hex(12)


def _at_fence(agent_id: str, fence: int) -> sa.ColumnElement[bool]:
    """The one run row of ``(agent, fence)`` (a fence opens at most one run)."""
    return sa.and_(RunRow.agent_id == agent_id, RunRow.fence == fence)


def run_id_at_fence(session: Session, agent_id: str, fence: int) -> str | None:
    """The id of the agent's run opened under ``fence``, or ``None`` when that run never opened its
    row (the lookup of a failure path that holds a lease but not the run id)."""
    found: str | None = session.execute(
        sa.select(RunRow.id).where(_at_fence(agent_id, fence))).scalar_one_or_none()
    return found


def get_run(session: Session, run_id: str, *, for_update: bool = False) -> RunRow:
    """The run row, freshly read (``FOR UPDATE`` on PostgreSQL when asked).

    Raises:
        InvalidInput: no such run.
    """
    stmt = sa.select(RunRow).where(RunRow.id == run_id).execution_options(populate_existing=True)
    row = session.execute(stmt.with_for_update() if for_update else stmt).scalar_one_or_none()
    if row is None:
        raise InvalidInput(f"unknown run {run_id!r}")
    return row


def start_run(
    session: Session,
    agent_id: str,
    *,
    fence: int,
    io_id: str | None,
    kind: str = "consolidate",
    run_id: str | None = None,
    retention: int | None = 200,
) -> RunRow:
    """Open the ``running`` row of the run holding ``fence`` (docs/algorithm/consolidation.md §3.3 step 1).

    Idempotent on ``(agent_id, fence)``: a redelivered task gets the stored row back, whatever its
    status. ``start_version`` is the agent's current version (``None`` = H0) read under the agent
    lock. Then the agent's run retention is applied.

    Raises:
        UnknownAgentError: no such agent.
    """
    start_version = lock_agent_version(session, agent_id)  # the lock; the state is not decoded
    existing = session.execute(
        sa.select(RunRow)
        .where(_at_fence(agent_id, fence))
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if existing is not None:
        return existing
    row = RunRow(
        id=run_id or new_run_id(),
        agent_id=agent_id,
        kind=kind,
        io_id=io_id,
        status="running",
        start_version=start_version,
        fence=fence,
    )
    session.add(row)
    session.flush()
    if retention is not None:
        retain_runs(session, agent_id, retention)
    return row


def skip_run(
    session: Session, agent_id: str, *, io_id: str | None, reason: str, kind: str = "consolidate"
) -> RunRow:
    """Record a turn that gets no consolidation as one finished ``skipped`` row without a fence
    (docs/algorithm/consolidation.md §3.12.4, e.g. "provider runs its own loop")."""
    agent = lock_agent(session, agent_id)
    row = RunRow(
        id=new_run_id(), agent_id=agent_id, kind=kind, io_id=io_id, status="skipped", reason=reason,
        start_version=agent.current_version, fence=None, result={"status": "skipped", "reason": reason},
    )
    row.finished_at = db_now()
    session.add(row)
    session.flush()
    session.refresh(row)
    return row


def _set_running_field(session: Session, run_id: str, **values: Any) -> bool:
    result = session.execute(
        sa.update(RunRow)
        .where(RunRow.id == run_id, RunRow.status == "running")
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def set_run_params(session: Session, run_id: str, params: Mapping[str, Any] | EncodedJSON) -> bool:
    """Store the round parameters (docs/algorithm/consolidation.md §3.3 step 10) on a ``running`` run; False
    if it is closed. ``params`` may be encoded already (``engine.encode_json``: before the write turn)."""
    value = params if isinstance(params, EncodedJSON) else dict(params)
    return _set_running_field(session, run_id, params=value)


def set_run_drafts(session: Session, run_id: str, drafts: Mapping[str, Any]) -> bool:
    """Store the drafts (label → draft, docs/algorithm/consolidation.md §3.3 step 12) on a ``running`` run;
    False if it is closed."""
    return _set_running_field(session, run_id, drafts=dict(drafts))


def finish_run(
    session: Session,
    run_id: str,
    status: str,
    *,
    reason: str | None = None,
    result: Mapping[str, Any] | None = None,
    error: ErrorRecord | Mapping[str, Any] | None = None,
) -> bool:
    """Close a ``running`` run without touching its agent (no state, no fence, no adoption).

    For closes that must not write anything else (e.g. ``skipped`` because the agent is frozen).
    Results that carry state or an adoption go through :func:`final_write`.

    Returns:
        True if the row was running and is now closed; False if it was already closed.

    Raises:
        InvalidInput: ``status`` is not a final status, or ``adopted``.
    """
    if status not in RUN_STATUSES or status in ("running", "adopted"):
        raise InvalidInput(f"finish_run cannot set status {status!r}")
    return _set_running_field(
        session, run_id, status=status, reason=reason,
        result=dict(result) if result is not None else None,
        error=dict(error) if error is not None else None, finished_at=db_now(),
    )


@dataclass(frozen=True)
class Adoption:
    """The winner of a run, adopted by :func:`final_write` (docs/algorithm/consolidation.md §3.12.7 c)."""

    version: str
    """Content-addressed version id of ``payload``."""
    payload: Mapping[str, Any] | EncodedJSON
    """Harness payload ``{manifest, files, version}`` (docs/formats.md §5.3), possibly encoded."""
    summary: Mapping[str, Any] | None = None
    """Stored on the ``rsi_harnesses`` row; default: the run's result."""
    regressions: Sequence[Mapping[str, Any]] = ()
    """Lessons the winner learned (``add_regressions`` entries), stored with the adoption."""
    regression_bound: int = 8
    """Lessons kept per agent."""


@dataclass(frozen=True)
class FinalWrite:
    """What :func:`final_write` did.

    ``outcome``: ``superseded`` (7a: nothing written, or the run row marked ``interrupted`` —
    ``run.status`` tells which), ``kept`` (7b: rollback won; run row and ``applied_fence`` only),
    ``written`` (7c without adoption), ``adopted`` (7c with adoption).
    """

    outcome: FinalOutcome
    run: RunRow
    agent: AgentRow

    @property
    def applied(self) -> bool:
        """True when the run's result (and state) were written (7c)."""
        return self.outcome in ("written", "adopted")


def _close(run: RunRow, status: str, reason: str | None, result: Mapping[str, Any] | None,
           error: Mapping[str, Any] | None, adopted_version: str | None) -> None:
    run.status = status
    run.reason = reason
    run.result = dict(result) if result is not None else None
    run.error = dict(error) if error is not None else None
    run.adopted_version = adopted_version
    run.finished_at = db_now()


def _flush(session: Session, *rows: RunRow | AgentRow) -> None:
    session.flush()
    for row in rows:  # read back the values the database clock filled in (only those: a full
        expired = instance_state(row).expired_attributes  # refresh would decode the state JSON again)
        if expired:
            session.refresh(row, attribute_names=sorted(expired))


def final_write(
    session: Session,
    run_id: str,
    *,
    status: str,
    reason: str | None = None,
    result: Mapping[str, Any] | EncodedJSON | None = None,
    state: Mapping[str, Any] | EncodedJSON | None = None,
    adoption: Adoption | None = None,
    error: ErrorRecord | Mapping[str, Any] | None = None,
) -> FinalWrite:
    """The fenced compare-and-swap final write of a run (docs/algorithm/consolidation.md §3.12.7), on the
    locked agent row.

    a. The run row is not ``running`` any more, or ``applied_fence ≥ run.fence`` (a newer run
       wrote) → ``superseded``: a ``running`` row becomes ``interrupted`` ("superseded"); a row
       already closed (swept, or this same write redelivered) is left as it is; nothing else.
    b. Adopting and ``current_version ≠ start_version`` (rollback, pin or clone meanwhile) →
       ``kept`` — also when the agent was frozen meanwhile (:data:`FROZEN_REASON`): run row ``kept``
       with :data:`KEPT_REASON` (``result`` copied with that status,
       reason, ``adopted: false`` and ``version = start_version``) and ``applied_fence``; the state
       is **not** saved.
    c. Otherwise ``state`` (when not ``None``; a ``failed`` run passes ``None`` and leaves the state
       unchanged, docs/algorithm/consolidation.md §3.12.8), ``applied_fence = fence``, the run row (status,
       reason, result,
       error, ``adopted_version``, ``finished_at``) and, when adopting, the ``rsi_harnesses`` row
       (``parent_version = start_version``; an already stored version keeps its first row),
       ``current_version`` and the lessons the winner learned (``rsi_regressions``).

    Case c runs in SQLAlchemy Core (:mod:`rsi_common.db.fenced_write`): the returned rows are then
    detached and hold the columns written (``agent.state`` only when ``state`` was given decoded).
    ``state``, ``result`` and the adoption's payload may be given encoded
    (:func:`~rsi_common.db.engine.encode_json`), by a caller that encodes them before its write
    transaction begins.

    Args:
        session: session inside a transaction (the caller commits).
        run_id: the run.
        status: result status: ``recorded``, ``kept``, ``failed``, ``skipped`` or ``adopted``
            (``adopted`` ⇔ ``adoption`` given).
        reason: one sentence.
        result: ``ConsolidationResult.summary()`` (no payload).
        state: the consolidation state to save, or ``None`` to keep the stored one.
        adoption: the winner to adopt.
        error: ``{type, message}`` when an exception failed the run.

    Raises:
        InvalidInput: unknown run, run without a fence, bad status/adoption combination.
    """
    if status not in _FINAL_STATUSES:
        raise InvalidInput(f"final status must be one of {_FINAL_STATUSES}, got {status!r}")
    if (status == "adopted") != (adoption is not None):
        raise InvalidInput("status 'adopted' requires an adoption, and only it")
    fenced = fenced_rows(session, run_id)
    if fenced is None:
        raise InvalidInput(f"unknown run {run_id!r}")
    if fenced.run["fence"] is None:
        raise InvalidInput(f"run {run_id!r} has no fence")
    if _applies(fenced, adoption):  # the common outcome, in Core (rsi_common/db/fenced_write.py)
        return _applied(session, fenced, status=status, reason=reason, result=result, state=state,
                        adoption=adoption, error=error)
    # the rare outcomes (superseded, kept) on the ORM rows, read again under the same lock
    summary: Mapping[str, Any] | None = json.loads(result.text) if isinstance(result, EncodedJSON) else result
    agent = lock_agent(session, fenced.run["agent_id"])
    run = get_run(session, run_id, for_update=True)
    if run.status != "running" or agent.applied_fence >= (run.fence or 0):
        if run.status == "running":
            _close(run, "interrupted", SUPERSEDED_REASON, {"status": "interrupted", "reason":
                   SUPERSEDED_REASON}, None, None)
            _flush(session, run, agent)
        return FinalWrite("superseded", run, agent)
    reason = KEPT_REASON if agent.current_version != run.start_version else FROZEN_REASON
    kept = None if summary is None else {
        **summary, "status": "kept", "reason": reason, "adopted": False, "version": run.start_version,
    }
    _close(run, "kept", reason, kept, error, None)
    agent.applied_fence = run.fence or 0
    _flush(session, run, agent)
    return FinalWrite("kept", run, agent)


def _applies(fenced: Fenced, adoption: Adoption | None) -> bool:
    """Case c of :func:`final_write`: the run is running, its fence is newer than the applied one,
    and an adoption finds the start version current and the agent not frozen."""
    run, agent = fenced.run, fenced.agent
    if run["status"] != "running" or agent["applied_fence"] >= run["fence"]:
        return False
    return adoption is None or (agent["current_version"] == run["start_version"] and not agent["frozen"])


def _applied(session: Session, fenced: Fenced, *, status: str, reason: str | None,
             result: Mapping[str, Any] | EncodedJSON | None, state: Mapping[str, Any] | EncodedJSON | None,
             adoption: Adoption | None, error: ErrorRecord | Mapping[str, Any] | None) -> FinalWrite:
    result_json = encoded(result)
    harness = None
    if adoption is not None:
        summary = result_json if adoption.summary is None else encoded(adoption.summary)
        payload = encoded(adoption.payload)
        assert payload is not None
        harness = (adoption.version, payload, summary)
    run, agent = applied_write(session, fenced, status=status, reason=reason, result=result_json,
                               state=encoded(state), error=encoded(error), adoption=harness)
    if adoption is not None:
        add_regressions(session, agent.id, adoption.version, run.id, adoption.regressions,
                        adoption.regression_bound)
    if state is not None and not isinstance(state, EncodedJSON):
        agent.state = dict(state)
    if result is not None and not isinstance(result, EncodedJSON):
        run.result = dict(result)
    run.error = dict(error) if error is not None else None
    return FinalWrite("adopted" if adoption else "written", run, agent)


def runs(session: Session, agent_id: str, limit: int = 50) -> list[RunRow]:
    """The agent's latest runs, newest first (``started_at``, then fence)."""
    return list(
        session.execute(
            sa.select(RunRow).where(RunRow.agent_id == agent_id).order_by(*_NEWEST).limit(max(0, limit))
        ).scalars()
    )


def running_runs(session: Session, agent_id: str | None = None) -> list[RunRow]:
    """Runs with status ``running`` (of one agent, or all), oldest first."""
    stmt = sa.select(RunRow).where(RunRow.status == "running")
    if agent_id is not None:
        stmt = stmt.where(RunRow.agent_id == agent_id)
    return list(session.execute(stmt.order_by(RunRow.started_at, RunRow.id)).scalars())


def retain_runs(session: Session | Connection, agent_id: str, keep: int) -> int:
    """Delete the agent's runs beyond the ``keep`` newest, with their replay rows.

    ``running`` rows are never deleted. The caller holds the agent lock. Returns the run count.
    """
    if keep < 0:
        raise ValueError("keep must be >= 0")
    kept = sa.select(RunRow.id).where(RunRow.agent_id == agent_id).order_by(*_NEWEST).limit(keep)
    doomed = list(
        session.execute(
            sa.select(RunRow.id).where(
                RunRow.agent_id == agent_id,
                RunRow.status != "running",
                RunRow.id.not_in(kept.scalar_subquery()),
            )
        ).scalars()
    )
    if not doomed:
        return 0
    session.execute(
        sa.delete(ReplayRow).where(ReplayRow.run_id.in_(doomed)).execution_options(synchronize_session=False)
    )
    session.execute(
        sa.delete(RunRow).where(RunRow.id.in_(doomed)).execution_options(synchronize_session=False)
    )
    return len(doomed)


def stale_runs(session: Session, lease_expired_ids: Iterable[str], stale_s: float) -> list[RunRow]:
    """``running`` runs the sweeper must close (docs/algorithm/consolidation.md §3.12.3).

    Args:
        lease_expired_ids: ids of running runs whose lease the sweeper found expired (no lease for
            the agent, or a lease of another fence: ``Coordinator.lease_holder``).
        stale_s: a running run that started more than this many seconds ago, by the database
            clock, is stale whatever its lease says (``RSI_RUN_STALE_S``).

    Returns:
        The union, oldest first.
    """
    ids = list(lease_expired_ids)
    cond = RunRow.started_at < db_ago(stale_s)
    if ids:
        cond = sa.or_(cond, RunRow.id.in_(ids))
    return list(
        session.execute(
            sa.select(RunRow).where(RunRow.status == "running", cond).order_by(RunRow.started_at, RunRow.id)
        ).scalars()
    )


def fence_status(
    session: Session, agent_id: str, fence: int, *, closed_for_s: float
) -> tuple[str, bool] | None:
    """The status of the agent's run of ``fence`` and whether it closed at least ``closed_for_s``
    seconds ago (database clock); ``None`` when no run row has that fence (the sweeper's lease check)."""
    row = session.execute(
        sa.select(RunRow.status, RunRow.finished_at < db_ago(closed_for_s))
        .where(_at_fence(agent_id, fence))
    ).one_or_none()
    return None if row is None else (str(row[0]), bool(row[1]))


def mark_interrupted(session: Session, run_ids: Iterable[str], reason: str = "lease expired") -> list[str]:
    """Close the given runs that are still ``running`` as ``interrupted``; nothing else is written.

    The runs' agents are locked first (in id order), like every other writer of run rows.

    Returns:
        The ids actually changed (a run closed meanwhile by its own final write is left alone).
    """
    ids = list(run_ids)
    if not ids:
        return []
    agents = session.execute(
        sa.select(RunRow.agent_id).where(RunRow.id.in_(ids), RunRow.status == "running").distinct()
    ).scalars()
    for agent_id in sorted(agents):  # same lock order as final_write (agent, then run): no deadlock
        lock_agent(session, agent_id)
    changed = session.execute(
        sa.update(RunRow)
        .where(RunRow.id.in_(ids), RunRow.status == "running")
        .values(status="interrupted", reason=reason, finished_at=db_now(),
                result={"status": "interrupted", "reason": reason})
        .returning(RunRow.id)
        .execution_options(synchronize_session=False)
    ).scalars()
    return sorted(changed)
