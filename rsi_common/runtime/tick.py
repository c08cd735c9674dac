"""``rsi.tick``: what the runtime's timers and a Redis flush leave to a periodic pass
(docs/runtime/failures.md). Every action is conditional on current state, so two tickers, or a tick
racing a turn, do no harm:

1. **overdue waits** — a yielded session whose ``wait_deadline`` passed is woken (its next slice
   returns partial results);
2. **mailboxes without a wake mark** — a mailbox holding unconsumed messages whose wake mark is
   missing (lost with a Redis flush, or a send whose enqueue failed; a queued child's spawn input
   included) is woken;
3. **child timeouts** — a live handle older than ``CHILD_TIMEOUT_S`` is cancelled (``timeout``) and
   its parent woken;
4. **cancel flags** — the flags of recently cancelled handles are set again (after a flush);
5. **heartbeats** — due ``rsi_schedules`` rows post their message by compare-and-set on ``next_at``
   (:func:`rsi_common.runtime.heartbeats.fire_due`) and wake the mailbox; an autonomy step a killed
   worker lost after its turn's commit runs again (:func:`rsi_common.runtime.autonomy.recover_steps`);
6. **idle eviction** — an agent ``idle`` for ``IDLE_EVICT_S`` becomes ``inactive`` and its Redis
   keys (bucket, wake marks, cooldown) are dropped; its next wake rebuilds it from SQL (``admitted``);
7. **expired turn leases** — a turn attempt whose lease expired uncommitted is charged ``lost:`` and
   re-enqueued, or failed ``worker_lost`` at ``MAX_TURN_ATTEMPTS`` (``rsi_common.runtime.attempts``);
8. **lost wakes** — a yielded session whose handles all settled, or a mailbox with unconsumed
   messages, whose wake mark is missing or stale (its message lost to a flush or a killed worker) is
   woken (``rsi_common.runtime.waits``).

Not built yet: skipping spent trees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from rsi_common.db.runtime_models import AgentRuntimeRow, MessageRow, SessionRow, SubagentRow
from rsi_common.db.sqltypes import db_ago, db_now
from rsi_common.runtime import keys
from rsi_common.runtime.attempts import recover_expired
from rsi_common.runtime.autonomy import recover_steps
from rsi_common.runtime.heartbeats import fire_due
from rsi_common.runtime.subagents import LIVE, after_settle, cancel, restore_cancel_flags
from rsi_common.runtime.tree import set_lifecycle
from rsi_common.runtime.turns import TurnEnv
from rsi_common.runtime.waits import wake_satisfied, wake_stale_marks

__all__ = ["TickReport", "tick"]


@dataclass
class TickReport:
    """What one tick did (counts, and the sessions it woke)."""

    woken: list[tuple[str, str]] = field(default_factory=list)
    overdue: int = 0
    orphaned: int = 0
    timed_out: int = 0
    flags: int = 0
    evicted: int = 0
    heartbeats: int = 0
    loop_steps: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"woken": [list(w) for w in self.woken], "overdue": self.overdue, "orphaned": self.orphaned,
                "timed_out": self.timed_out, "flags": self.flags, "evicted": self.evicted,
                "heartbeats": self.heartbeats, "loop_steps": self.loop_steps}


def tick(env: TurnEnv, *, limit: int = 500) -> TickReport:
    """One pass (module docstring); at most ``limit`` sessions of each kind."""
    report = TickReport()
    redis, params = env.client.redis, env.params
    with env.factory() as s:
        now = s.execute(sa.select(db_now())).scalar_one()
        overdue = s.execute(sa.select(SessionRow.agent_id, SessionRow.session).where(
            SessionRow.pending.is_not(None), SessionRow.wait_deadline <= now).limit(limit)).all()
        boxes = s.execute(sa.select(MessageRow.recipient, MessageRow.session_id).where(
            MessageRow.consumed_io.is_(None)).group_by(MessageRow.recipient, MessageRow.session_id)
            .limit(limit)).all()
        deleted = set(s.execute(sa.select(AgentRuntimeRow.agent_id).where(
            AgentRuntimeRow.lifecycle == "deleted")).scalars())
        stale = list(s.execute(sa.select(SubagentRow.id).where(
            SubagentRow.status.in_(LIVE), SubagentRow.created_at <= db_ago(params.child_timeout_s))
            .limit(limit)).scalars())
    for agent, session in overdue:
        report.overdue += 1
        _wake(env, report, agent, session)
    for agent, session in boxes:
        if agent in deleted or redis.exists(keys.wake(agent, session)):
            continue
        report.orphaned += 1
        _wake(env, report, agent, session)
    for h in stale:
        with env.factory.begin() as s:
            done = cancel(s, h, "timeout")
            parents = s.execute(sa.select(SubagentRow.parent_agent, SubagentRow.parent_session).where(
                SubagentRow.id.in_(done))).all()
        after_settle(redis, done, cancelled=True, ttl_s=params.child_timeout_s)
        report.timed_out += len(done)
        for agent, session in sorted(set(parents)):
            _wake(env, report, agent, session)
    with env.factory() as s:
        report.flags = restore_cancel_flags(s, redis, ttl_s=params.child_timeout_s)
    report.heartbeats = _beats(env, report, now, limit)
    report.loop_steps = recover_steps(env, params, limit=limit)
    with env.factory.begin() as s:
        idle = list(s.execute(sa.select(AgentRuntimeRow).where(
            AgentRuntimeRow.lifecycle == "idle", AgentRuntimeRow.updated_at <= db_ago(params.idle_evict_s))
            .limit(limit)).scalars())
        for row in idle:
            set_lifecycle(s, row, "inactive", "runtime", f"idle for {params.idle_evict_s} s")
    for row in idle:
        names = [keys.bucket(row.agent_id), keys.refine_cooldown(row.agent_id)]
        names += [k for k in redis.scan_iter(match=f"rsi:{row.agent_id}:wake:*", count=100)]
        redis.delete(*names)
        report.evicted += 1
    report.woken += recover_expired(env).requeued  # expired turn leases (docs/runtime/failures.md)
    report.woken += wake_satisfied(env) + wake_stale_marks(env)  # lost wakes (runtime/waits.py)
    return report


def _beats(env: TurnEnv, report: TickReport, now: Any, limit: int) -> int:
    fired = fire_due(env.factory, now, limit=limit)
    for agent, session in fired:
        _wake(env, report, agent, session)
    return len(fired)


def _wake(env: TurnEnv, report: TickReport, agent: str, session: str) -> None:
    env.wake(agent, session)
    report.woken.append((agent, session))
