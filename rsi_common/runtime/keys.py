"""The runtime's Redis key schema (docs/runtime/README.md#redis-keys): every key in one place.

Redis only coordinates; each key can be rebuilt from SQL (docs/runtime/failures.md).

======================================  ===============================================================
``rsi:{a}:turn:{s}``                    lease of the turn running for agent × session; TTL turn_lease_s
``rsi:{a}:wake:{s}``                    wake mark: a turn is enqueued; TTL 300 s
``rsi:{a}:effects:{io}``                ``at_most_once`` tool calls started by io (a list)
``rsi:{a}:bucket``                      message rate bucket (hash ``tokens``, ``ts_ms``)
``rsi:{a}:refine_cd``                   refine cooldown; TTL refine_cooldown_s
``rsi:{a}:pending_refine``              a refine waiting for the consolidation lease (JSON)
``rsi:{a}:spent:{day}``                 hash ``tokens``: the agent's committed spend of the day
``rsi:tree:{r}:spent:{day}``            hash ``tokens usd_micro turns spawns messages``: the tree's day
``rsi:tree:{r}:reserve``                hash reservation id → ``agent|tokens|expires_ms``
``rsi:tree:{r}:slots``                  ZSET session key → lease expiry (ms): turns running
``rsi:tree:{r}:waiting``                list of session keys waiting for a slot (FIFO)
``rsi:sa:{h}:done``                     list: one element pushed when the handle settles
``rsi:sa:{h}:cancel``                   ``"1"`` once the handle (or an ancestor) is cancelled
``rsi:{a}:attempt:{s}``                 hash of the session's latest turn attempt (io, n, res, root)
``rsi:turns:inflight``                  ZSET ``{a}|{s}`` → lease expiry (ms) of running attempts
======================================  ===============================================================
"""

from __future__ import annotations

__all__ = [
    "INFLIGHT",
    "SPENT_TTL_S",
    "WAKE_TTL_S",
    "agent_spent",
    "attempt",
    "bucket",
    "effects",
    "handle_cancel",
    "handle_done",
    "pending_refine",
    "refine_cooldown",
    "tree_reserve",
    "tree_slots",
    "tree_spent",
    "tree_waiting",
    "turn_lease",
    "wake",
]

SPENT_TTL_S = 3 * 86_400
"""Day counters expire three days after their last write (they are rebuilt from SQL if read)."""
WAKE_TTL_S = 300
"""Lifetime of a wake mark."""


def turn_lease(agent: str, session: str) -> str:
    return f"rsi:{agent}:turn:{session}"


def wake(agent: str, session: str) -> str:
    return f"rsi:{agent}:wake:{session}"


def effects(agent: str, io: str) -> str:
    return f"rsi:{agent}:effects:{io}"


def bucket(agent: str) -> str:
    return f"rsi:{agent}:bucket"


def refine_cooldown(agent: str) -> str:
    return f"rsi:{agent}:refine_cd"


def pending_refine(agent: str) -> str:
    return f"rsi:{agent}:pending_refine"


def agent_spent(agent: str, day: str) -> str:
    return f"rsi:{agent}:spent:{day}"


def tree_spent(root: str, day: str) -> str:
    return f"rsi:tree:{root}:spent:{day}"


def tree_reserve(root: str) -> str:
    return f"rsi:tree:{root}:reserve"


def tree_slots(root: str) -> str:
    return f"rsi:tree:{root}:slots"


def tree_waiting(root: str) -> str:
    return f"rsi:tree:{root}:waiting"


def handle_done(handle: str) -> str:
    return f"rsi:sa:{handle}:done"


def handle_cancel(handle: str) -> str:
    return f"rsi:sa:{handle}:cancel"


INFLIGHT = "rsi:turns:inflight"
"""ZSET ``{agent}|{session}`` → lease expiry (ms) of every turn attempt running (renewed with its
lease); the tick recovers members whose lease expired uncommitted (docs/runtime/failures.md)."""


def attempt(agent: str, session: str) -> str:
    """Hash of the session's latest attempt: ``io``, ``n`` (attempt number of that io), ``res``, ``root``."""
    return f"rsi:{agent}:attempt:{session}"
