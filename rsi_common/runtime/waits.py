"""Satisfied waits after a Redis flush (docs/runtime/failures.md, R10 "Redis flush").

A parent whose children all settled was woken by the last settlement (a wake mark and a queued
turn). A flush of Redis, or a lost broker message, loses that wake; nothing else would run the
parent's next slice until its wait deadline. :func:`wake_satisfied` (called by ``rsi.tick``) wakes
every yielded session with no live handle left and no wake mark. A wake that finds the wait not
met is harmless (the turn returns ``waiting``). An ``any`` wait that one settled child satisfies while
others live is not found here; it is woken at its deadline (the tick's overdue waits).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from rsi_common.db.runtime_models import SessionRow, SubagentRow
from rsi_common.runtime import keys
from rsi_common.runtime.subagents import LIVE

__all__ = ["wake_satisfied"]


def wake_satisfied(env: Any, *, limit: int = 500) -> list[tuple[str, str]]:
    """Wake every yielded session whose handles all settled and that has no wake mark; returns them.

    ``env`` is the process's :class:`~rsi_common.runtime.turns.TurnEnv`."""
    live = sa.select(SubagentRow.id).where(SubagentRow.parent_agent == SessionRow.agent_id,
                                           SubagentRow.parent_session == SessionRow.session,
                                           SubagentRow.status.in_(LIVE))
    with env.factory() as s:
        rows = s.execute(sa.select(SessionRow.agent_id, SessionRow.session).where(
            SessionRow.pending.is_not(None), ~live.exists()).limit(limit)).all()
    woken = []
    for agent, session in rows:
        if not env.client.redis.exists(keys.wake(agent, session)):
            env.wake(agent, session)
            woken.append((str(agent), str(session)))
    return woken
