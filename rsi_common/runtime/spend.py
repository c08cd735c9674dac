"""The spend ledger ``rsi_spend`` (docs/runtime/accounting.md#ledger).

One row per unique key, charged to the tree's root; a second charge with the same key is a no-op
(``ON CONFLICT DO NOTHING`` on both backends), which is what makes a redelivered commit, a retried
spawn or a repeated run write harmless. The day is the database clock's UTC date, read in the
charging transaction.

Key kinds: ``turn:{agent}:{io}``, ``spawn:{h}``, ``msg:{id}``, ``run:{run}``,
``lost:{agent}:{io}:{attempt}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from rsi_common.db.runtime_models import SpendRow
from rsi_common.db.sqltypes import db_now
from rsi_common.runtime.caps import DayTotals

__all__ = [
    "Charge",
    "SpendKind",
    "agent_totals",
    "charge",
    "db_day",
    "lost_key",
    "msg_key",
    "run_key",
    "spawn_key",
    "tree_totals",
    "turn_key",
]

SpendKind = Literal["turn", "spawn", "msg", "run", "lost"]


def turn_key(agent: str, io: str) -> str:
    """Key of a committed turn slice."""
    return f"turn:{agent}:{io}"


def spawn_key(handle: str) -> str:
    """Key of a spawn."""
    return f"spawn:{handle}"


def msg_key(message_id: str) -> str:
    """Key of a sent message."""
    return f"msg:{message_id}"


def run_key(run_id: str) -> str:
    """Key of a consolidation or refine run's role and replay tokens."""
    return f"run:{run_id}"


def lost_key(agent: str, io: str, attempt: int) -> str:
    """Key of a crashed attempt's reservation."""
    return f"lost:{agent}:{io}:{attempt}"


@dataclass(frozen=True)
class Charge:
    """One charge. ``tokens`` counts every purpose (c(τ)); ``usd`` by the model's price."""

    key: str
    kind: SpendKind
    root_id: str
    agent_id: str
    tokens: int = 0
    usd: float = 0.0
    model_calls: int = 0
    tool_calls: int = 0
    turns: int = 0
    spawns: int = 0
    messages: int = 0

    def totals(self) -> DayTotals:
        """What the charge adds to its tree's day (``agent_tokens`` = ``tokens``)."""
        return DayTotals(tokens=self.tokens, agent_tokens=self.tokens, usd=self.usd, turns=self.turns,
                         spawns=self.spawns, messages=self.messages)


def db_day(session: Session) -> str:
    """Today's UTC date by the database clock, ``YYYY-MM-DD``."""
    now = session.execute(sa.select(db_now())).scalar_one()
    return str(now.strftime("%Y-%m-%d"))


def charge(session: Session, c: Charge, day: str | None = None) -> bool:
    """Insert ``c`` unless its key is already charged; inside the caller's transaction.

    Args:
        session: the caller's transaction (the charge commits with it).
        c: the charge.
        day: the UTC day (default: :func:`db_day`).

    Returns:
        ``True`` if this call inserted the row, ``False`` if the key was charged before.
    """
    values: dict[str, Any] = {
        "key": c.key, "kind": c.kind, "root_id": c.root_id, "agent_id": c.agent_id,
        "day": day or db_day(session), "tokens": int(c.tokens), "usd": float(c.usd),
        "model_calls": c.model_calls, "tool_calls": c.tool_calls, "turns": c.turns, "spawns": c.spawns,
        "messages": c.messages,
    }
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    stmt: Any = dialect.insert(SpendRow).values(**values).on_conflict_do_nothing(index_elements=["key"])
    result: Any = session.execute(stmt)
    return bool(result.rowcount)


_SUMS = (sa.func.coalesce(sa.func.sum(SpendRow.tokens), 0), sa.func.coalesce(sa.func.sum(SpendRow.usd), 0.0),
         sa.func.coalesce(sa.func.sum(SpendRow.turns), 0), sa.func.coalesce(sa.func.sum(SpendRow.spawns), 0),
         sa.func.coalesce(sa.func.sum(SpendRow.messages), 0))


def tree_totals(session: Session, root_id: str, day: str) -> DayTotals:
    """The tree's charges on ``day`` (``agent_tokens`` left 0)."""
    tokens, usd, turns, spawns, messages = session.execute(
        sa.select(*_SUMS).where(SpendRow.root_id == root_id, SpendRow.day == day)).one()
    return DayTotals(tokens=int(tokens), usd=float(usd), turns=int(turns), spawns=int(spawns),
                     messages=int(messages))


def agent_totals(session: Session, agent_id: str, day: str) -> int:
    """Tokens charged to ``agent_id`` on ``day``."""
    return int(session.execute(sa.select(_SUMS[0]).where(
        SpendRow.agent_id == agent_id, SpendRow.day == day)).scalar_one())
