"""The agent runtime's shared core (docs/runtime/README.md): accounting and caps, the tree's
agents, sub-agent handles, mailboxes, goals, heartbeats and autonomy. No Celery here: the worker's
tasks (``rsi_worker.agent_runtime``) and the inline paths both call it.
"""

from __future__ import annotations

from rsi_common.runtime.budget import Budget, Grant
from rsi_common.runtime.caps import CAP_FIELDS, DIMS, Caps, DayTotals, first_exceeded, resolve_caps
from rsi_common.runtime.prices import Price, price_of, usd_micro, usd_of
from rsi_common.runtime.spend import (
    Charge,
    agent_totals,
    charge,
    db_day,
    lost_key,
    msg_key,
    run_key,
    spawn_key,
    tree_totals,
    turn_key,
)

__all__ = [
    "CAP_FIELDS",
    "DIMS",
    "Budget",
    "Caps",
    "Charge",
    "DayTotals",
    "Grant",
    "Price",
    "agent_totals",
    "charge",
    "db_day",
    "first_exceeded",
    "lost_key",
    "msg_key",
    "price_of",
    "resolve_caps",
    "run_key",
    "spawn_key",
    "tree_totals",
    "turn_key",
    "usd_micro",
    "usd_of",
]
