"""Durable state of offline evolve runs (docs/algorithm/evolve.md#durable-state).

Four tables, migration ``0006_evolve``:

* ``rsi_suites`` — one row per task suite (``name`` is the key; the validated suite JSON).
* ``rsi_evolves`` — one row per evolve run: its suite, configuration, status (``created``,
  ``running``, ``stopped``, ``done``, ``failed``), ``stop_requested`` (``rsi evolve stop``) and the
  run state JSON (incumbent, S★, δ, calibration, trajectory, history rows; written once per
  finished step).
* ``rsi_evolve_rounds`` — one row per round ``t`` (``t = −1`` is the baseline): the state before the
  round, the analysis report, the directives, the drafts and the judgement (``decision``).
* ``rsi_evolve_trials`` — one row per trial ``(evolve, t, candidate, task_id, trial, attempt)``, the
  idempotency key: a second execution of a slot stores nothing (``INSERT … ON CONFLICT DO NOTHING``)
  and reads the first row back, so no trial is ever counted twice.

Every function runs inside the caller's transaction and never commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, Session, mapped_column

from rsi_common.db.models import Base
from rsi_common.db.sqltypes import BigIntId, JSONType, UTCDateTime, db_now
from rsi_common.errors import InvalidInput

__all__ = [
    "EVOLVE_STATUSES",
    "TRIAL_STATUSES",
    "EvolveRoundRow",
    "EvolveRow",
    "EvolveTrialRow",
    "SuiteRow",
    "evolve_round",
    "evolve_rounds",
    "evolve_trials",
    "get_evolve",
    "get_suite",
    "running_evolves",
    "save_evolve_trial",
    "upsert_evolve_round",
]

EVOLVE_STATUSES = ("created", "running", "stopped", "done", "failed")
TRIAL_STATUSES = ("ok", "missing", "cancelled")


class SuiteRow(Base):
    """A validated task suite (docs/algorithm/evolve.md#suites)."""

    __tablename__ = "rsi_suites"

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    spec: Mapped[Any] = mapped_column(JSONType, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())


class EvolveRow(Base):
    """One evolve run (module docstring)."""

    __tablename__ = "rsi_evolves"

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    suite: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    config: Mapped[Any] = mapped_column(JSONType, nullable=False)
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="created")
    stop_requested: Mapped[bool] = mapped_column(sa.Boolean(), nullable=False, default=False)
    state: Mapped[Any] = mapped_column(JSONType, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), nullable=False, default=db_now(), onupdate=db_now()
    )


class EvolveRoundRow(Base):
    """One round of an evolve run (``t = −1``: the baseline)."""

    __tablename__ = "rsi_evolve_rounds"
    __table_args__ = (sa.UniqueConstraint("evolve", "t"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    evolve: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("rsi_evolves.name", ondelete="CASCADE"), nullable=False
    )
    t: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    before: Mapped[Any] = mapped_column(JSONType, nullable=True)
    analysis: Mapped[Any] = mapped_column(JSONType, nullable=True)
    directives: Mapped[Any] = mapped_column(JSONType, nullable=True)
    drafts: Mapped[Any] = mapped_column(JSONType, nullable=True)
    decision: Mapped[Any] = mapped_column(JSONType, nullable=True)


class EvolveTrialRow(Base):
    """One trial of an evolve run; the 6-column unique key is the idempotency key."""

    __tablename__ = "rsi_evolve_trials"
    __table_args__ = (sa.UniqueConstraint("evolve", "t", "candidate", "task_id", "trial", "attempt"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    evolve: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("rsi_evolves.name", ondelete="CASCADE"), nullable=False
    )
    t: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    candidate: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    task_id: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    trial: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    attempt: Mapped[int] = mapped_column(sa.Integer(), nullable=False, default=0)
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    reward: Mapped[float] = mapped_column(sa.Double(), nullable=False, default=0.0)
    weight: Mapped[float] = mapped_column(sa.Double(), nullable=False, default=0.0)
    tokens: Mapped[int | None] = mapped_column(sa.Integer(), nullable=True)
    result: Mapped[Any] = mapped_column(JSONType, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())


_TRIAL_KEY = ("evolve", "t", "candidate", "task_id", "trial", "attempt")


def get_suite(session: Session, name: str) -> SuiteRow | None:
    """The stored suite, or ``None``."""
    return session.get(SuiteRow, name)


def get_evolve(session: Session, name: str, *, for_update: bool = False) -> EvolveRow | None:
    """The evolve run, or ``None`` (``for_update``: locked on PostgreSQL)."""
    stmt = sa.select(EvolveRow).where(EvolveRow.name == name).execution_options(populate_existing=True)
    if for_update:
        stmt = stmt.with_for_update()
    return session.execute(stmt).scalar_one_or_none()


def running_evolves(session: Session) -> list[str]:
    """Names of the evolve runs with status ``running``, sorted."""
    stmt = sa.select(EvolveRow.name).where(EvolveRow.status == "running").order_by(EvolveRow.name)
    return [str(n) for n in session.execute(stmt).scalars()]


def evolve_round(session: Session, name: str, t: int) -> EvolveRoundRow | None:
    """Round ``t`` of the run, or ``None``."""
    return session.execute(
        sa.select(EvolveRoundRow)
        .where(EvolveRoundRow.evolve == name, EvolveRoundRow.t == t)
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def evolve_rounds(session: Session, name: str) -> list[EvolveRoundRow]:
    """Every round row of the run, by ``t``."""
    return list(
        session.execute(
            sa.select(EvolveRoundRow).where(EvolveRoundRow.evolve == name).order_by(EvolveRoundRow.t)
        ).scalars()
    )


def upsert_evolve_round(session: Session, name: str, t: int, **fields: Any) -> EvolveRoundRow:
    """Create round ``t`` or set the given fields (``before``, ``analysis``, ``directives``, ``drafts``,
    ``decision``) on it."""
    unknown = sorted(set(fields) - {"before", "analysis", "directives", "drafts", "decision"})
    if unknown:
        raise InvalidInput(f"evolve round: unknown field(s) {', '.join(unknown)}")
    row = evolve_round(session, name, t)
    if row is None:
        row = EvolveRoundRow(evolve=name, t=t)
        session.add(row)
    for key, value in fields.items():
        setattr(row, key, value)
    session.flush()
    return row


def save_evolve_trial(
    session: Session,
    name: str,
    t: int,
    candidate: str,
    task_id: str,
    trial: int,
    attempt: int = 0,
    *,
    status: str,
    reward: float = 0.0,
    weight: float = 0.0,
    tokens: int | None = None,
    result: Mapping[str, Any] | None = None,
) -> tuple[EvolveTrialRow, bool]:
    """Store a trial unless its slot has a row; returns ``(stored row, created)``.

    Raises:
        InvalidInput: unknown status, negative trial or attempt.
    """
    if status not in TRIAL_STATUSES:
        raise InvalidInput(f"trial status must be one of {TRIAL_STATUSES}, got {status!r}")
    if trial < 0 or attempt < 0:
        raise InvalidInput("trial and attempt must be >= 0")
    values: dict[str, Any] = {
        "evolve": name,
        "t": t,
        "candidate": candidate,
        "task_id": task_id,
        "trial": trial,
        "attempt": attempt,
        "status": status,
        "reward": float(reward),
        "weight": float(weight),
        "tokens": tokens,
        "result": dict(result) if result is not None else None,
    }
    if session.get_bind().dialect.name == "postgresql":
        stmt: Any = (
            postgresql.insert(EvolveTrialRow)
            .values(**values)
            .on_conflict_do_nothing(index_elements=_TRIAL_KEY)
        )
    else:
        stmt = (
            sqlite.insert(EvolveTrialRow).values(**values).on_conflict_do_nothing(index_elements=_TRIAL_KEY)
        )
    # one statement when the slot is new (the row comes back from RETURNING); a second delivery,
    # which stored nothing, reads the stored row
    stored = session.scalars(
        stmt.returning(EvolveTrialRow), execution_options={"populate_existing": True}
    ).one_or_none()
    if stored is not None:
        return stored, True
    row = session.execute(
        sa.select(EvolveTrialRow)
        .where(*(getattr(EvolveTrialRow, k) == values[k] for k in _TRIAL_KEY))
        .execution_options(populate_existing=True)
    ).scalar_one()
    return row, False


def evolve_trials(
    session: Session, name: str, t: int | None = None, candidate: str | None = None
) -> list[EvolveTrialRow]:
    """The run's trial rows (of round ``t`` and/or one candidate), in insertion order."""
    stmt = sa.select(EvolveTrialRow).where(EvolveTrialRow.evolve == name)
    if t is not None:
        stmt = stmt.where(EvolveTrialRow.t == t)
    if candidate is not None:
        stmt = stmt.where(EvolveTrialRow.candidate == candidate)
    return list(session.execute(stmt.order_by(EvolveTrialRow.id)).scalars())
