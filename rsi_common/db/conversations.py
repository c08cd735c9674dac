"""Conversation history of the ``Agent`` façade (docs/host/agent.md#conversation-history).

One table, migration ``0005_conversations``: ``rsi_conversations`` holds one row per turn of a
conversation — the turn's transcript (the user input, the assistant messages, the tool results), in
the block convention of :mod:`rsi_common.llm.base` — numbered ``seq`` from 1 within
``(agent_id, conversation_id)``. ``(agent_id, io_id)`` is unique, so storing a turn twice stores it
once. The rows are the host's conversation state, separate from the worlds (which are retained,
clipped and scrubbed for consolidation) and read by nobody else.

Every function runs inside the caller's transaction and never commits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, Session, mapped_column

from rsi_common.boundary import check_id, check_int
from rsi_common.db.models import Base
from rsi_common.db.sqltypes import BigIntId, JSONType, UTCDateTime, db_now

__all__ = ["ConversationRow", "append_turn", "conversation_window", "forget_conversation"]


class ConversationRow(Base):
    """One turn of a conversation (module docstring)."""

    __tablename__ = "rsi_conversations"
    __table_args__ = (
        sa.UniqueConstraint("agent_id", "conversation_id", "seq"),
        sa.UniqueConstraint("agent_id", "io_id"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    conversation_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    seq: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    io_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    messages: Mapped[Any] = mapped_column(JSONType, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())


def append_turn(s: Session, agent_id: str, conversation_id: str, io_id: str,
                messages: list[dict[str, Any]], *, retention: int) -> ConversationRow:
    """Store one turn's transcript as the conversation's next turn; keep the newest ``retention``.

    A turn already stored under ``io_id`` is returned unchanged.

    Raises:
        InputLimitError: an id breaks the id grammar.
        InvalidInput: ``retention`` below 1.
    """
    check_id(agent_id, "agent_id")
    check_id(conversation_id, "conversation")
    check_id(io_id, "io_id")
    check_int(retention, "retention", lo=1)
    existing = s.scalar(sa.select(ConversationRow).where(ConversationRow.agent_id == agent_id,
                                                        ConversationRow.io_id == io_id))
    if existing is not None:
        return existing
    where = (ConversationRow.agent_id == agent_id, ConversationRow.conversation_id == conversation_id)
    last = s.scalar(sa.select(sa.func.max(ConversationRow.seq)).where(*where)) or 0
    row = ConversationRow(agent_id=agent_id, conversation_id=conversation_id, seq=last + 1, io_id=io_id,
                          messages=messages)
    s.add(row)
    s.flush()
    s.execute(sa.delete(ConversationRow).where(*where, ConversationRow.seq <= last + 1 - retention))
    return row


def conversation_window(s: Session, agent_id: str, conversation_id: str, turns: int) -> list[dict[str, Any]]:
    """The messages of the conversation's newest ``turns`` turns, oldest first (``[]`` when new).

    Raises:
        InputLimitError: an id breaks the id grammar.
    """
    check_id(agent_id, "agent_id")
    check_id(conversation_id, "conversation")
    if turns <= 0:
        return []
    rows = s.scalars(
        sa.select(ConversationRow)
        .where(ConversationRow.agent_id == agent_id, ConversationRow.conversation_id == conversation_id)
        .order_by(ConversationRow.seq.desc())
        .limit(turns)
    ).all()
    out: list[dict[str, Any]] = []
    for row in reversed(rows):
        out.extend(m for m in row.messages if isinstance(m, dict))
    return out


def forget_conversation(s: Session, agent_id: str, conversation_id: str) -> int:
    """Delete every stored turn of the conversation; returns how many."""
    check_id(agent_id, "agent_id")
    check_id(conversation_id, "conversation")
    result = s.execute(sa.delete(ConversationRow).where(ConversationRow.agent_id == agent_id,
                                                        ConversationRow.conversation_id == conversation_id))
    return int(getattr(result, "rowcount", 0) or 0)
