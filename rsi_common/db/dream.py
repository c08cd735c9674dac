"""Storage of the Dream-RSI loop (docs/dream/worlds.md#storage), migration ``0007_dream``.

Three tables beside the conversation worlds:

* ``rsi_dream_worlds``: one frozen tree per row (``rsi-dream-world/1``), unique per ``(agent_id,
  world_id)``; ``origin`` is ``generated``, ``live`` or ``imported``; a live tree names its cycle.
* ``rsi_dream_cycles``: one cycle per row, ``status`` and the resumable ``state`` (phases done, the
  versions, V, m★, the confirmation, the next β).
* ``rsi_dream_episodes``: one replay episode per ``(cycle_id, label, world_id, beta_key)``, so a
  sweep or an evaluation interrupted anywhere resumes with the episodes already stored.

Every function runs inside the caller's transaction and never commits. Trees are validated by the
caller (``rsi_worker.dream.tree``) before they are stored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, Session, mapped_column

from rsi_common.boundary import check_id
from rsi_common.db.models import Base
from rsi_common.db.sqltypes import BigIntId, JSONType, UTCDateTime, db_now

__all__ = [
    "DREAM_CYCLE_STATUSES",
    "DreamCycleRow",
    "DreamEpisodeRow",
    "DreamWorldRow",
    "add_dream_world",
    "dream_cycles",
    "dream_episodes",
    "dream_worlds",
    "save_dream_episode",
]

DREAM_CYCLE_STATUSES = ("running", "pending_confirmation", "vetoed", "promoted", "kept", "failed")


class DreamWorldRow(Base):
    """One frozen exploration tree."""

    __tablename__ = "rsi_dream_worlds"
    __table_args__ = (sa.UniqueConstraint("agent_id", "world_id"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    world_id: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    task_id: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    origin: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    cycle_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    tree: Mapped[Any] = mapped_column(JSONType, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())


class DreamCycleRow(Base):
    """One Dream cycle of an agent."""

    __tablename__ = "rsi_dream_cycles"
    __table_args__ = (sa.UniqueConstraint("agent_id", "iteration"),)

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    agent_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    iteration: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    status: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    state: Mapped[Any] = mapped_column(JSONType, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), nullable=False, default=db_now(), onupdate=db_now()
    )


class DreamEpisodeRow(Base):
    """One stored replay episode (its result JSON)."""

    __tablename__ = "rsi_dream_episodes"
    __table_args__ = (sa.UniqueConstraint("cycle_id", "label", "world_id", "beta_key"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    cycle_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    label: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    world_id: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    beta_key: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    result: Mapped[Any] = mapped_column(JSONType, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())


def add_dream_world(
    s: Session, agent_id: str, tree: dict[str, Any], *, origin: str, cycle_id: str | None = None
) -> tuple[DreamWorldRow, bool]:
    """Store a validated tree unless its ``world_id`` is stored for the agent: ``(row, created)``."""
    check_id(agent_id, "agent_id")
    world_id = check_id(tree["world_id"], "world_id")
    existing = s.scalar(
        sa.select(DreamWorldRow).where(DreamWorldRow.agent_id == agent_id, DreamWorldRow.world_id == world_id)
    )
    if existing is not None:
        return existing, False
    row = DreamWorldRow(
        agent_id=agent_id,
        world_id=world_id,
        task_id=str(tree["task_id"]),
        origin=origin,
        cycle_id=cycle_id,
        tree=tree,
    )
    s.add(row)
    s.flush()
    return row, True


def dream_worlds(s: Session, agent_id: str) -> list[DreamWorldRow]:
    """The agent's trees, oldest first."""
    return list(
        s.scalars(
            sa.select(DreamWorldRow).where(DreamWorldRow.agent_id == agent_id).order_by(DreamWorldRow.id)
        )
    )


def dream_cycles(s: Session, agent_id: str) -> list[DreamCycleRow]:
    """The agent's cycles by iteration."""
    return list(
        s.scalars(
            sa.select(DreamCycleRow)
            .where(DreamCycleRow.agent_id == agent_id)
            .order_by(DreamCycleRow.iteration)
        )
    )


def save_dream_episode(
    s: Session, cycle_id: str, label: str, world_id: str, beta_key: str, result: dict[str, Any]
) -> None:
    """Store an episode result unless that episode is already stored (the first one wins)."""
    existing = s.scalar(
        sa.select(DreamEpisodeRow.id).where(
            DreamEpisodeRow.cycle_id == cycle_id,
            DreamEpisodeRow.label == label,
            DreamEpisodeRow.world_id == world_id,
            DreamEpisodeRow.beta_key == beta_key,
        )
    )
    if existing is None:
        s.add(
            DreamEpisodeRow(
                cycle_id=cycle_id, label=label, world_id=world_id, beta_key=beta_key, result=result
            )
        )
        s.flush()


def dream_episodes(s: Session, cycle_id: str, label: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Stored episodes of one (cycle, label): ``(world_id, beta_key) → result``."""
    rows = s.execute(
        sa.select(DreamEpisodeRow.world_id, DreamEpisodeRow.beta_key, DreamEpisodeRow.result).where(
            DreamEpisodeRow.cycle_id == cycle_id, DreamEpisodeRow.label == label
        )
    )
    return {(w, b): r for w, b, r in rows}
