"""Turn attempts: lease renewal, expired-lease recovery, ``MAX_TURN_ATTEMPTS``, ``lost:`` charges and
``UNCERTAIN_SIDE_EFFECT`` (docs/runtime/failures.md).

An *attempt* is one execution of an io that got its lease and a tree slot. :func:`begin` records it in
``rsi:{a}:attempt:{s}`` (``io``, ``n`` = the attempt number of that io, reservation id, root) and in
the ZSET ``rsi:turns:inflight`` (score = lease expiry, ms); a :class:`LeaseKeeper` thread renews the
lease, the tree slot and that score every ``TURN_LEASE_S`` / 3 while the attempt runs; :func:`end`
clears both when the attempt returns. Only a crash (or an exception) leaves the record, so:

* **recovery** (:func:`recover_expired`, called by ``rsi.tick``): a member whose lease is gone and whose
  expiry is at least 0.25, 1, 5 s old (by its attempt number, :data:`BACKOFF_S`) is claimed once (a Lua
  ``ZREM``: two tickers claim it once), charged ``lost:{a}:{io}:{n}`` = its whole reservation, and its
  turn re-enqueued; at attempt ``MAX_TURN_ATTEMPTS`` the io fails instead (``worker_lost``);
* **the next attempt** of the same io (a broker redelivery may come first) charges the previous
  attempt's ``lost:`` key too (one row per key: whoever comes second inserts nothing), fails with
  ``worker_lost`` past ``MAX_TURN_ATTEMPTS``, and fails with ``UNCERTAIN_SIDE_EFFECT`` when the io's
  ``at_most_once`` journal is non-empty and no world was stored for it (a stored world is committed,
  not re-run, so its effects are known).

Failing an io (:func:`fail_io`) is one transaction, optimistic on ``rsi_sessions.version`` and only if
the io is still the session's uncommitted one: the session moves past the io (history unchanged), the
messages claimed by it are consumed, a child's handle settles ``failed`` with the code as its error,
the agent becomes ``failed`` (``worker_lost``) or ``idle`` (``UNCERTAIN_SIDE_EFFECT``), an
``rsi_events`` row ``turn_failed`` is written; then the parent is woken.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import sqlalchemy as sa

from rsi_common import db
from rsi_common.config import RuntimeParams
from rsi_common.db.runtime_models import AgentRuntimeRow, MessageRow, SessionRow, SubagentRow
from rsi_common.runtime import keys
from rsi_common.runtime.budget import Budget
from rsi_common.runtime.effects import UNCERTAIN
from rsi_common.runtime.spend import Charge, charge, db_day, lost_key
from rsi_common.runtime.subagents import after_settle, settle
from rsi_common.runtime.tree import add_event, set_lifecycle

__all__ = ["BACKOFF_S", "RECORD_TTL_S", "WORKER_LOST", "Begun", "LeaseKeeper", "RecoveryReport", "begin",
           "end", "fail_io", "keeper", "recover_expired", "session_io"]

BACKOFF_S: tuple[float, ...] = (0.25, 1.0, 5.0)
"""Delay after the lease expired before crashed attempt 1, 2, 3+ is re-enqueued, in seconds."""
WORKER_LOST = "worker_lost"
RECORD_TTL_S = 86_400
"""An attempt record outlives every re-run of its io."""



class TurnEnv(Protocol):
    """What this module uses of :class:`rsi_common.runtime.turns.TurnEnv` (which imports this module)."""

    @property
    def client(self) -> Any: ...
    @property
    def params(self) -> RuntimeParams: ...
    @property
    def wake(self) -> Callable[[str, str], None]: ...
    @property
    def budget(self) -> Budget: ...
    @property
    def factory(self) -> Any: ...


_BEGIN = """
local n, prev, grant = 1, 0, 0
if redis.call('HGET', KEYS[1], 'io') == ARGV[1] then
  prev = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
  grant = tonumber(redis.call('HGET', KEYS[1], 'grant') or '0')
  n = prev + 1
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'io', ARGV[1], 'n', n, 'res', ARGV[2], 'root', ARGV[3])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
redis.call('ZADD', KEYS[2], tonumber(ARGV[4]), ARGV[5])
return {n, prev, redis.call('LLEN', KEYS[3]), grant}
"""
_END = """
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('HGET', KEYS[1], 'io') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local exp = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('ZADD', KEYS[2], 'XX', exp, ARGV[3])
redis.call('ZADD', KEYS[3], 'XX', exp, ARGV[3])
return 1
"""
_CLAIM = """
local now = tonumber(ARGV[1])
local nb = #ARGV - 2
local out = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
for i = 1, #due, 2 do
  local m, exp = due[i], tonumber(due[i + 1])
  local sep = string.find(m, '|[^|]*$')
  local a, s = string.sub(m, 1, sep - 1), string.sub(m, sep + 1)
  if redis.call('EXISTS', 'rsi:' .. a .. ':turn:' .. s) == 0 then
    local hk = 'rsi:' .. a .. ':attempt:' .. s
    local n = tonumber(redis.call('HGET', hk, 'n') or '1')
    local back = tonumber(ARGV[2 + math.min(math.max(n, 1), nb)])
    if exp + back <= now then
      redis.call('ZREM', KEYS[1], m)
      local f = redis.call('HMGET', hk, 'io', 'n', 'res', 'root', 'grant')
      table.insert(out, m)
      table.insert(out, f[1] or '')
      table.insert(out, f[2] or '0')
      table.insert(out, f[3] or '')
      table.insert(out, f[4] or '')
      table.insert(out, f[5] or '0')
    end
  end
end
return out
"""


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@dataclass
class _Entry:
    lease: str
    token: str
    slots: str
    member: str
    px: int
    renewed: float = field(default_factory=time.monotonic)


class LeaseKeeper:
    """Renews the lease, the tree slot and the in-flight score of every attempt this process runs,
    every ``px / 3``, from one daemon thread (started on first use). A crashed process renews nothing,
    so its leases expire after ``TURN_LEASE_S``.

    Args:
        client: the Redis client.
        background: renew from the daemon thread; ``False`` leaves every renewal to the caller's
            :meth:`renew_due` (a test that must know which call renewed what).
    """

    def __init__(self, client: Any, *, background: bool = True) -> None:
        self.redis = client
        self._renew = client.register_script(_RENEW)
        self._entries: dict[int, _Entry] = {}
        self._lock = threading.Lock()
        self._seq = 0
        self._background = background
        self._thread: threading.Thread | None = None

    def add(self, lease: str, token: str, slots: str, member: str, px: int) -> int:
        """Start renewing; returns the id :meth:`remove` takes."""
        with self._lock:
            self._seq += 1
            self._entries[self._seq] = _Entry(lease, token, slots, member, px)
            if self._thread is None and self._background:
                self._thread = threading.Thread(target=self._loop, name="rsi-turn-leases", daemon=True)
                self._thread.start()
            return self._seq

    def remove(self, entry_id: int) -> None:
        with self._lock:
            self._entries.pop(entry_id, None)

    def renew_due(self) -> int:
        """Renew every entry last renewed ``px / 3`` ago or more; returns how many leases were renewed."""
        now = time.monotonic()
        with self._lock:
            due = [e for e in self._entries.values() if now - e.renewed >= e.px / 3000]
        n = 0
        for e in due:
            try:
                n += int(self._renew(keys=[e.lease, e.slots, keys.INFLIGHT], args=[e.token, e.px, e.member]))
            except Exception:  # Redis down: the next pass retries; the lease may expire meanwhile
                continue
            e.renewed = now
        return n

    def _loop(self) -> None:
        while True:
            time.sleep(0.2)
            self.renew_due()


_KEEPERS: dict[int, LeaseKeeper] = {}
_KEEPERS_LOCK = threading.Lock()


def keeper(env: TurnEnv) -> LeaseKeeper:
    """The process's keeper of ``env``'s Redis client."""
    with _KEEPERS_LOCK:
        k = _KEEPERS.get(id(env.client.redis))
        if k is None or k.redis is not env.client.redis:
            k = _KEEPERS[id(env.client.redis)] = LeaseKeeper(env.client.redis)
        return k


def session_io(row: SessionRow) -> str:
    """The io the session's next attempt runs: ``{s}:{turns}+{slice+1}`` while a logical turn waits,
    else ``{s}:{turns+1}``."""
    if row.pending is not None:
        return f"{row.session}:{row.turns}+{row.slice + 1}"
    return f"{row.session}:{row.turns + 1}"


@dataclass(frozen=True)
class Begun:
    """An attempt :func:`begin` recorded: its number, and the keeper entry renewing its lease."""

    n: int
    entry: int


def begin(env: TurnEnv, agent: str, session: str, io: str, *, res_id: str, root: str,
          token: str) -> Begun | tuple[str, int]:
    """Record attempt ``n`` of ``io`` and start renewing its lease; or the code it must fail with.

    Returns:
        :class:`Begun`, or ``(code, n)``: ``worker_lost`` past ``MAX_TURN_ATTEMPTS``,
        ``UNCERTAIN_SIDE_EFFECT`` when the io's journal is non-empty and no world is stored for it.
        The previous attempt of the same io, if any, was charged its ``lost:`` key either way.
    """
    redis, params = env.client.redis, env.params
    px = params.turn_lease_s * 1000
    member = f"{agent}|{session}"
    sec, usec = redis.time()
    expiry = int(sec) * 1000 + int(usec) // 1000 + px
    n, prev, journal, prev_grant = (int(x) for x in redis.eval(
        _BEGIN, 3, keys.attempt(agent, session), keys.INFLIGHT, keys.effects(agent, io),
        io, res_id, root, expiry, member, RECORD_TTL_S))
    if prev:
        charge_lost(env, agent, io, prev, root, res_id, prev_grant)
    if n > params.max_turn_attempts:
        return WORKER_LOST, n
    if journal:
        with env.factory() as s:
            stored = db.world_by_io(s, agent, io)
        if stored is None:
            return UNCERTAIN, n
    entry = keeper(env).add(keys.turn_lease(agent, session), token, keys.tree_slots(root), member, px)
    return Begun(n, entry)


def end(env: TurnEnv, agent: str, session: str, io: str, begun: Begun | None) -> None:
    """The attempt returned (whatever its outcome): stop renewing and clear its record."""
    if begun is not None:
        keeper(env).remove(begun.entry)
    env.client.redis.eval(_END, 2, keys.attempt(agent, session), keys.INFLIGHT, io, f"{agent}|{session}")


def stop_renewing(env: TurnEnv, agent: str, session: str, begun: Begun | None, grant: int) -> None:
    """The attempt raised: stop renewing, keep its record (recovery re-runs the io) with its grant
    (the turn released its reservation, so the ``lost:`` charge reads it here)."""
    if begun is not None:
        keeper(env).remove(begun.entry)
        env.client.redis.hset(keys.attempt(agent, session), "grant", int(grant))


def charge_lost(env: TurnEnv, agent: str, io: str, n: int, root: str, res_id: str, grant: int = 0) -> bool:
    """Charge crashed attempt ``n`` of ``io`` its whole reservation as ``lost:{agent}:{io}:{n}`` (once;
    ``False`` if the key was charged before). The reservation is the tree's entry ``res_id`` (a killed
    attempt leaves it, and a re-run of the io reuses it), else ``grant`` (an attempt that raised
    released its entry and recorded its grant)."""
    raw = env.client.redis.hget(keys.tree_reserve(root), res_id) if res_id else None
    grant = int(_s(raw).split("|")[-2]) if raw else int(grant)
    with env.factory.begin() as s:
        day = db_day(s)
        c = Charge(lost_key(agent, io, n), "lost", root, agent, tokens=grant)
        inserted = charge(s, c, day)
        if inserted:
            add_event(s, agent, "attempt_lost", "runtime", io=io, attempt=n, tokens=grant)
    if inserted:
        env.budget.settle("", root, day, c, agent)  # the reservation stays for the io's re-run
    return inserted


def fail_io(env: TurnEnv, agent: str, session: str, io: str, code: str) -> bool:
    """Fail ``io`` with ``code`` (module docstring) if it is still the session's uncommitted io.
    Returns whether this call failed it."""
    params = env.params
    handle: SubagentRow | None = None
    won = False
    with env.factory.begin() as s:
        row = s.execute(sa.select(SessionRow).where(SessionRow.agent_id == agent,
                                                    SessionRow.session == session)).scalar_one_or_none()
        if row is None or session_io(row) != io:
            return False
        n = row.turns if row.pending is not None else row.turns + 1
        done: Any = s.execute(sa.update(SessionRow).where(
            SessionRow.id == row.id, SessionRow.version == row.version).values(
            version=row.version + 1, turns=n, slice=0, pending=None, wait_deadline=None))
        if not done.rowcount:
            s.rollback()
            return False
        s.execute(sa.update(MessageRow).where(
            MessageRow.recipient == agent, MessageRow.session_id == session, MessageRow.consumed_io.is_(None),
            MessageRow.claimed_io.in_((io, f"{session}:{n}"))).values(consumed_io=io))
        handle = s.get(SubagentRow, session) if session.startswith("sa_") else None
        won = handle is not None and n == 1 and settle(s, handle.id, "failed", error=code)
        rt = s.get(AgentRuntimeRow, agent)
        if rt is not None:
            set_lifecycle(s, rt, "failed" if code == WORKER_LOST else "idle", "runtime", f"turn {io}: {code}")
        add_event(s, agent, "turn_failed", "runtime", io=io, error=code)
    if won and handle is not None:
        after_settle(env.client.redis, [handle.id], cancelled=False, ttl_s=params.child_timeout_s)
        env.wake(handle.parent_agent, handle.parent_session)
    return True


def refuse_failed(env: TurnEnv, agent: str, session: str) -> None:
    """A turn of a ``failed`` agent does not run: a live handle of its session settles ``failed``
    (``agent_failed``) so the parent's wait ends."""
    if not session.startswith("sa_"):
        return
    with env.factory.begin() as s:
        handle = s.get(SubagentRow, session)
        won = handle is not None and settle(s, session, "failed", error="agent_failed")
        parent = (handle.parent_agent, handle.parent_session) if handle is not None else None
    if won and parent is not None:
        after_settle(env.client.redis, [session], cancelled=False, ttl_s=env.params.child_timeout_s)
        env.wake(*parent)


@dataclass
class RecoveryReport:
    """What one recovery pass did: sessions re-enqueued and ios failed (``worker_lost``)."""

    requeued: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    lost_charged: int = 0


def recover_expired(env: TurnEnv, *, now_ms: int | None = None, limit: int = 200) -> RecoveryReport:
    """Claim every in-flight attempt whose lease expired uncommitted (and whose backoff passed), charge
    it ``lost:``, and re-enqueue its turn, or fail the io at ``MAX_TURN_ATTEMPTS`` (module docstring).

    Args:
        env: the process's turn environment.
        now_ms: the clock (Redis ``TIME`` by default; tests pass a later one).
        limit: members looked at per pass.
    """
    redis, params = env.client.redis, env.params
    report = RecoveryReport()
    if now_ms is None:
        sec, usec = redis.time()
        now_ms = int(sec) * 1000 + int(usec) // 1000
    backoff = [int(b * 1000) for b in BACKOFF_S]
    raw = [_s(x) for x in redis.eval(_CLAIM, 1, keys.INFLIGHT, now_ms, limit, *backoff)]
    for i in range(0, len(raw), 6):
        member, io, n_s, res_id, root, grant = raw[i:i + 6]
        agent, _, session = member.rpartition("|")
        if not io:
            continue
        with env.factory() as s:
            row = s.execute(sa.select(SessionRow).where(SessionRow.agent_id == agent,
                                                        SessionRow.session == session)).scalar_one_or_none()
            current = None if row is None else session_io(row)
        if current != io:  # committed before the crash: nothing was lost
            redis.eval(_END, 2, keys.attempt(agent, session), keys.INFLIGHT, io, member)
            continue
        n = int(n_s)
        report.lost_charged += charge_lost(env, agent, io, n, root, res_id, int(grant))
        if n >= params.max_turn_attempts:
            if fail_io(env, agent, session, io, WORKER_LOST):
                report.failed.append((agent, session))
            continue
        redis.delete(keys.wake(agent, session))  # the crashed turn's mark would swallow the wake
        env.wake(agent, session)
        report.requeued.append((agent, session))
    return report
