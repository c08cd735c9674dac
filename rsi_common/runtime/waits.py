"""Lost wakes: satisfied waits after a Redis flush, and wake marks whose message was lost
(docs/runtime/failures.md, R10 "Redis flush").

A parent whose children all settled was woken by the last settlement (a wake mark and a queued
turn). A flush of Redis loses the mark and the queued turn; a worker killed between the broker's pop
and its unacked record loses the message but leaves the mark, which then swallows every later wake
for ``WAKE_TTL_S`` (300 s). Both are found from SQL by ``rsi.tick``:

* :func:`wake_satisfied` wakes every yielded session with no live handle left whose mark is missing
  or stale;
* :func:`wake_stale_marks` wakes every mailbox holding unconsumed messages whose mark is stale (the
  tick's own step wakes those whose mark is missing).

A mark is *stale* when it is at least :data:`STALE_WAKE_S` old and no turn holds the session's lease;
it is deleted and the session woken again. A wake that finds nothing to do is harmless (``waiting``,
``empty`` or ``busy``). An ``any`` wait that one settled child satisfies while others live is not
found here; it is woken at its deadline (the tick's overdue waits).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from rsi_common.db.runtime_models import MessageRow, SessionRow, SubagentRow
from rsi_common.runtime import keys
from rsi_common.runtime.subagents import LIVE

__all__ = ["STALE_WAKE_S", "mark_missing_or_stale", "wake_satisfied", "wake_stale_marks"]

STALE_WAKE_S = 60
"""A wake mark this old (seconds) with no lease held is taken for a lost message."""


def mark_missing_or_stale(redis: Any, agent: str, session: str) -> bool:
    """Whether the session's wake mark is missing, or stale (then it is deleted)."""
    key = keys.wake(agent, session)
    ttl = int(redis.ttl(key))
    if ttl == -2:
        return True
    if keys.WAKE_TTL_S - ttl < STALE_WAKE_S or redis.exists(keys.turn_lease(agent, session)):
        return False
    redis.delete(key)
    return True


def wake_satisfied(env: Any, *, limit: int = 500) -> list[tuple[str, str]]:
    """Wake every yielded session whose handles all settled and whose wake mark is missing or stale;
    returns them.

    ``env`` is the process's :class:`~rsi_common.runtime.turns.TurnEnv`."""
    live = sa.select(SubagentRow.id).where(SubagentRow.parent_agent == SessionRow.agent_id,
                                           SubagentRow.parent_session == SessionRow.session,
                                           SubagentRow.status.in_(LIVE))
    with env.factory() as s:
        rows = s.execute(sa.select(SessionRow.agent_id, SessionRow.session).where(
            SessionRow.pending.is_not(None), ~live.exists()).limit(limit)).all()
    woken = []
    for agent, session in rows:
        if mark_missing_or_stale(env.client.redis, agent, session):
            env.wake(agent, session)
            woken.append((str(agent), str(session)))
    return woken


def wake_stale_marks(env: Any, *, limit: int = 500) -> list[tuple[str, str]]:
    """Wake every mailbox with unconsumed messages whose wake mark is stale; returns them."""
    redis = env.client.redis
    with env.factory() as s:
        rows = s.execute(sa.select(MessageRow.recipient, MessageRow.session_id).where(
            MessageRow.consumed_io.is_(None)).group_by(MessageRow.recipient, MessageRow.session_id)
            .limit(limit)).all()
    woken = []
    for agent, session in rows:
        if redis.exists(keys.wake(agent, session)) and mark_missing_or_stale(redis, agent, session):
            env.wake(agent, session)
            woken.append((str(agent), str(session)))
    return woken
