"""Redis coordination protocol (docs/protocol.md#redis-key-protocol): the whole key schema and its Lua
scripts.

Redis holds only coordination; the durable truth is SQL. Every multi-key update is one Lua script,
so it is atomic on a single Redis server. The same scripts run on a real ``redis-server`` and on
``fakeredis[lua]`` (embedded in-process mode); the contract tests run on both.

Keys (``{agent}``, ``{run}``, ``{cand}`` are format fields; values are UTF-8 strings):

================================  =======================================================================
``rsi:{agent}:lease``             token of the run holding the agent's lease; TTL ``lease_s``, renewed
``rsi:{agent}:pending``           io id of the newest turn that finished while the lease was held; no TTL
``rsi:{agent}:fence``             the agent's fence counter; no TTL (see *Fences*)
``rsi:{agent}:pending_refine``    io (``refine:<request id>``) of a refine that waits for the lease; no TTL
``rsi:run:{run}:bound:{cand}``    hash ``A``, ``B``, ``R`` (integers, docs/algorithm/formulas.md §2.10) and
``S_star``,
                                  ``delta``, ``S_t`` (``repr`` floats); TTL ``run_ttl_s``
``rsi:run:{run}:slots:{cand}``    set of trial slots already counted (redelivery safety); TTL ``run_ttl_s``
``rsi:run:{run}:cancel:{cand}``   ``"1"`` once the candidate provably cannot pass the floor; TTL ``run_ttl_s``
``rsi:run:{run}:join:{step}``     dispatch claim of a run step (``rsi_worker.cluster.join``)
``rsi:run:{run}:step:{step}``     the Celery task id executing a run step (``rsi_worker.cluster.join``)
``rsi:rate:{token}:{minute}``     requests of one service API token in one minute (epoch minute of the
                                  Redis clock); TTL 120 s (``rsi_worker.service.ratelimit``)
================================  =======================================================================

The sweeper iterates the agents that have a lease or a pending mark with :meth:`Coordinator.agents_with`
(``SCAN`` over ``rsi:*:lease`` / ``rsi:*:pending``; the agent id is the text between the prefix and
the suffix, whatever characters it holds).

Pub/sub channel :data:`HARNESS_CHANNEL` (``rsi:harness``): message = agent id, published on every
adopt, rollback, pin or clone (docs/algorithm/consolidation.md §3.12.9). Run keys expire ``run_ttl_s`` after
their last write
and :meth:`Coordinator.cleanup_run` deletes them at the end of a run. Redis Cluster is not
supported (the scripts' keys carry no hash tags); a single server or Sentinel is.

**Leases.** :meth:`Coordinator.try_begin` takes the lease with ``SET NX PX`` and issues the next
fence in the same script; if the lease is held it sets the pending mark instead (newest io wins).
:meth:`Coordinator.finish` releases the lease unless a turn is pending; then, atomically, it clears
the pending mark, hands the lease to a **new token and a new fence**
(docs/algorithm/consolidation.md §3.12.2) and returns the
re-run's :class:`Lease` (its ``io`` is the pending io). The old token stops matching, so a repeated
``finish`` with the old lease returns ``None``: the pending io is handed out exactly once.
A refine that waits (:meth:`Coordinator.try_begin_refine`, docs/runtime/refine.md#run) goes
ahead of a pending turn: ``finish`` (and ``begin_pending``) hand the lease to it and clear the pending
io, which the refine run covers.

**How a lost lease is detected.** A lease is lost exactly when ``rsi:{agent}:lease`` no longer holds
the Lease's token: it expired because nobody renewed it within ``lease_s`` (by the Redis server's
clock), another run took it after it expired, or ``finish`` handed it to the re-run.
:meth:`Coordinator.renew` compares and extends in one script and returns ``False`` then; every
task of a run renews on start and between long steps and stops at once on ``False``
(``errors.LeaseLost``). A paused process that resumes after its lease expired may still reach the
database, which is why the final SQL write is also fenced (``rsi_agents.applied_fence``).

**Fences.** ``INCR rsi:{agent}:fence``, issued only when a lease is taken or handed to a re-run,
so while a lease exists the counter equals its holder's fence (:meth:`Coordinator.lease_holder`).
When the counter does not exist it is first seeded with the Redis server time in microseconds:
fences stay increasing across a Redis restart without persistence (embedded mode) as long as the
server clock does not go back and fewer than one run per microsecond starts, so the SQL fence
check never mistakes a new run for an old one.

**Early stop.** :meth:`Coordinator.report_trial` counts each trial slot once (``SADD``), moves
``weight`` from R to B and adds ``passed`` to A, then evaluates docs/algorithm/formulas.md §2.10
``can_stop_exactly``
— ``(A + R)/(B + R) + margin < min(S★ − δ, S_t)`` with the same IEEE double arithmetic as
:func:`rsi_common.math.bounds.can_stop_exactly` — and sets the cancel flag when it holds.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis

from rsi_common.errors import InvalidInput
from rsi_common.math.bounds import FLOAT_GUARD

__all__ = [
    "DEFAULT_RUN_TTL_S",
    "DELIVERY_PATTERN",
    "DELIVERY_TTL_S",
    "HARNESS_CHANNEL",
    "SPEND_TTL_S",
    "Bounds",
    "Coordinator",
    "Lease",
    "LeaseHolder",
    "bound_key",
    "cancel_key",
    "delivery_key",
    "dispatch_key",
    "fence_key",
    "lease_key",
    "pending_key",
    "pending_refine_key",
    "rate_key",
    "slots_key",
    "spend_key",
    "step_key",
    "wave_key",
]

HARNESS_CHANNEL = "rsi:harness"
"""Pub/sub channel of harness changes; the message is the agent id."""
DEFAULT_RUN_TTL_S = 86_400
"""Run keys (bounds, slots, cancel flags) expire this long after their last write."""


def lease_key(agent: str) -> str:
    """``rsi:{agent}:lease`` — token of the run holding the agent's lease."""
    return f"rsi:{agent}:lease"


def pending_key(agent: str) -> str:
    """``rsi:{agent}:pending`` — io id of the newest turn that finished during a run."""
    return f"rsi:{agent}:pending"


def pending_refine_key(agent: str) -> str:
    """``rsi:{agent}:pending_refine`` — io of the refine run waiting for the lease."""
    return f"rsi:{agent}:pending_refine"


def fence_key(agent: str) -> str:
    """``rsi:{agent}:fence`` — the agent's monotonically increasing fence counter."""
    return f"rsi:{agent}:fence"


def bound_key(run: str, cand: str) -> str:
    """``rsi:run:{run}:bound:{cand}`` — hash A, B, R, S_star, delta, S_t of one candidate."""
    return f"rsi:run:{run}:bound:{cand}"


def slots_key(run: str, cand: str) -> str:
    """``rsi:run:{run}:slots:{cand}`` — set of trial slots already counted in the bound."""
    return f"rsi:run:{run}:slots:{cand}"


def cancel_key(run: str, cand: str) -> str:
    """``rsi:run:{run}:cancel:{cand}`` — set once the candidate provably cannot pass the floor."""
    return f"rsi:run:{run}:cancel:{cand}"


def wave_key(run: str, cand: str) -> str:
    """``rsi:run:{run}:wave:{cand}`` — the claim of the candidate's second-wave sender on the cluster
    (docs/performance/consolidation.md#trial-order)."""
    return f"rsi:run:{run}:wave:{cand}"


def dispatch_key(run: str, step: str) -> str:
    """``rsi:run:{run}:join:{step}`` — the dispatch claim of an in-band join or a sweeper resume."""
    return f"rsi:run:{run}:join:{step}"


def step_key(run: str, step: str) -> str:
    """``rsi:run:{run}:step:{step}`` — the task id executing ``step`` of ``run``."""
    return f"rsi:run:{run}:step:{step}"


def delivery_key(task_id: str) -> str:
    """Counter of the deliveries of one Celery task id (the redelivery cap); expires after
    :data:`DELIVERY_TTL_S`."""
    return f"rsi:task:{task_id}:deliveries"


DELIVERY_PATTERN = "rsi:task:*:deliveries"
"""``SCAN`` pattern of every :func:`delivery_key` (the load test reads them)."""
DELIVERY_TTL_S = 24 * 3600
"""How long a task's delivery count is kept (also the result TTL of the Celery app)."""


def rate_key(token: str, minute: int) -> str:
    """``rsi:rate:{token}:{minute}`` — a service API token's requests in one epoch minute."""
    return f"rsi:rate:{token}:{minute}"


def spend_key(day: str, agent: str | None = None) -> str:
    """``rsi:spend:{day}:agent:{agent}`` / ``rsi:spend:{day}:cluster`` — consolidation tokens spent on a
    UTC day (``YYYY-MM-DD``) by one agent / by the whole cluster."""
    return f"rsi:spend:{day}:agent:{agent}" if agent is not None else f"rsi:spend:{day}:cluster"


SPEND_TTL_S = 3 * 86_400
"""Spend counters expire this long after their last write (a day's figures stay readable)."""


# --- Lua ----------------------------------------------------------------------------------------

# KEYS: agent spend, cluster spend. ARGV: tokens, ttl_ms. -> {agent total, cluster total}.
_SPEND_ADD = """
local a = redis.call('INCRBY', KEYS[1], ARGV[1])
local c = redis.call('INCRBY', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {a, c}
"""

_NEXT_FENCE = """
local function next_fence(key)
  if redis.call('EXISTS', key) == 0 then
    local t = redis.call('TIME')
    redis.call('SET', key, t[1] .. string.format('%06d', tonumber(t[2])))
  end
  return redis.call('INCR', key)
end
"""

# KEYS: lease, pending, fence. ARGV: token, io, lease_ms. -> fence, or 0 (pending set).
_TRY_BEGIN = _NEXT_FENCE + """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then
  redis.call('DEL', KEYS[2])
  return next_fence(KEYS[3])
end
redis.call('SET', KEYS[2], ARGV[2])
return 0
"""

# KEYS: lease, pending, fence, pending_refine. ARGV: token, io, lease_ms. -> fence, or 0 (refine waits).
_TRY_BEGIN_REFINE = _NEXT_FENCE + """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then
  redis.call('DEL', KEYS[2])
  return next_fence(KEYS[3])
end
redis.call('SET', KEYS[4], ARGV[2])
return 0
"""

# KEYS: lease. ARGV: token, lease_ms. -> 1 renewed, 0 lost.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease, agent's spend, cluster's spend. ARGV: token, lease_ms.
# -> {renewed (1/0), agent tokens, cluster tokens} (a spend key never written reads as nil), or
# {renewed} alone when the spend read failed (MGET reads a key of another type as nil, as ``spend``):
# renew and spend in one EVALSHA.
_RENEW_SPEND = """
local renewed = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  renewed = 1
end
local spent = redis.pcall('MGET', KEYS[2], KEYS[3])
if type(spent) == 'table' and spent.err then return {renewed} end
return {renewed, spent[1], spent[2]}
"""

# KEYS: lease, pending, fence, pending_refine. ARGV: token, new_token, lease_ms.
# -> {-1} lost, {0} released, {1, io, fence} handed to the re-run (a waiting refine first).
_FINISH = _NEXT_FENCE + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1} end
local rf = redis.call('GET', KEYS[4])
if rf then
  redis.call('DEL', KEYS[4], KEYS[2])
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return {1, rf, next_fence(KEYS[3])}
end
local io = redis.call('GET', KEYS[2])
if not io then
  redis.call('DEL', KEYS[1])
  return {0}
end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, io, next_fence(KEYS[3])}
"""

# KEYS: lease, pending, fence, pending_refine. ARGV: token, lease_ms. -> {0} nothing, {1, io, fence} begun.
_BEGIN_PENDING = _NEXT_FENCE + """
local io = redis.call('GET', KEYS[4]) or redis.call('GET', KEYS[2])
if not io then return {0} end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0} end
redis.call('DEL', KEYS[2], KEYS[4])
return {1, io, next_fence(KEYS[3])}
"""

# KEYS: lease. ARGV: token. -> 1 deleted, 0 not ours.
_DELETE_IF = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""

# Mirrors rsi_common.math.bounds.can_stop_exactly (docs/algorithm/formulas.md §2.10.2), same double
# arithmetic:
# Python's min(a, b) returns a unless b < a.
_CAN_STOP = """
local function can_stop(bound, margin)
  local h = redis.call('HMGET', bound, 'A', 'B', 'R', 'S_star', 'delta', 'S_t')
  local A, B, R = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
  local den = B + R
  local upper = 0.0
  if den ~= 0 then upper = (A + R) / den end
  local floor = tonumber(h[4]) - tonumber(h[5])
  local s_t = tonumber(h[6])
  if s_t < floor then floor = s_t end
  return upper + margin < floor
end
"""

# KEYS: bound, cancel. ARGV: R, S_star, delta, S_t, ttl_ms, margin. -> {initialised 0/1, cancelled 0/1}
_INIT_BOUNDS = _CAN_STOP + """
local created = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'A', 0, 'B', 0, 'R', ARGV[1],
             'S_star', ARGV[2], 'delta', ARGV[3], 'S_t', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  created = 1
  if can_stop(KEYS[1], tonumber(ARGV[6])) then redis.call('SET', KEYS[2], '1', 'PX', ARGV[5]) end
end
return {created, redis.call('EXISTS', KEYS[2])}
"""

# KEYS: bound, slots, cancel. ARGV: slot, passed, weight, ttl_ms, margin.
# -> 1 cancelled, 0 not; error 'rsi-bounds: ...' when the weight exceeds R.
_REPORT = _CAN_STOP + """
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.call('EXISTS', KEYS[3]) end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 0 then
  local passed, weight = tonumber(ARGV[2]), tonumber(ARGV[3])
  if weight > 0 then
    local R = tonumber(redis.call('HGET', KEYS[1], 'R'))
    if weight > R then
      return redis.error_reply('rsi-bounds: weight ' .. ARGV[3] .. ' exceeds the remaining weight R ' .. R)
    end
    redis.call('HINCRBY', KEYS[1], 'R', -weight)
    redis.call('HINCRBY', KEYS[1], 'B', weight)
    redis.call('HINCRBY', KEYS[1], 'A', passed)
  end
  redis.call('SADD', KEYS[2], ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
if redis.call('EXISTS', KEYS[3]) == 0 and can_stop(KEYS[1], tonumber(ARGV[5])) then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[4])
end
return redis.call('EXISTS', KEYS[3])
"""


# --- values -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """The right of one run to work on one agent.

    Attributes:
        agent: agent id.
        token: random token stored in the lease key while the lease is held.
        fence: the run's fence (monotonically increasing per agent); the final SQL write checks it.
        io: the io id (turn) the run was started for.
    """

    agent: str
    token: str
    fence: int
    io: str


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds an agent's lease now (for the sweeper): token and fence of the holding run."""

    token: str
    fence: int


@dataclass(frozen=True)
class Bounds:
    """A candidate's early-stop state (docs/algorithm/formulas.md §2.10) as stored in Redis."""

    A: int
    B: int
    R: int
    S_star: float
    delta: float
    S_t: float


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _check_float(name: str, value: float) -> str:
    x = float(value)
    if not math.isfinite(x):
        raise InvalidInput(f"{name} must be finite, got {value!r}")
    return repr(x)


def _check_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{name} must be an integer >= 0, got {value!r}")
    return value


# --- the coordinator ----------------------------------------------------------------------------


class Coordinator:
    """The coordination protocol over one Redis client (real ``redis.Redis`` or ``fakeredis``).

    Thread-safe (redis-py clients pool their connections); holds no state besides the client.

    Args:
        client: a Redis client; responses may be bytes or decoded strings.
        lease_s: lease TTL in seconds (``RSI_LEASE_S``); every renewal extends it to this.
        run_ttl_s: TTL of run keys in seconds, counted from their last write.
        margin: the early-stop margin (docs/algorithm/formulas.md §2.10, ``FLOAT_GUARD`` = 1e-9).
    """

    def __init__(
        self,
        client: redis.Redis,
        lease_s: float,
        *,
        run_ttl_s: float = DEFAULT_RUN_TTL_S,
        margin: float = FLOAT_GUARD,
    ) -> None:
        if not lease_s > 0 or not run_ttl_s > 0:
            raise InvalidInput("lease_s and run_ttl_s must be > 0")
        if not (margin >= 0 and math.isfinite(margin)):
            raise InvalidInput("margin must be finite and >= 0")
        self.client = client
        self.lease_ms = max(1, round(lease_s * 1000))
        self.run_ttl_ms = max(1, round(run_ttl_s * 1000))
        self.margin = float(margin)
        self._try_begin = client.register_script(_TRY_BEGIN)
        self._renew = client.register_script(_RENEW)
        self._renew_spend = client.register_script(_RENEW_SPEND)
        self._spend_add = client.register_script(_SPEND_ADD)
        self._finish = client.register_script(_FINISH)
        self._begin_pending = client.register_script(_BEGIN_PENDING)
        self._try_begin_refine = client.register_script(_TRY_BEGIN_REFINE)
        self._delete_if = client.register_script(_DELETE_IF)
        self._init_bounds = client.register_script(_INIT_BOUNDS)
        self._report = client.register_script(_REPORT)

    # --- leases ---------------------------------------------------------------------------------

    def try_begin(self, agent: str, io: str) -> Lease | None:
        """Take the agent's lease for a run started by turn ``io``, or mark ``io`` pending.

        Returns:
            The new :class:`Lease` (new token, next fence; a stale pending mark is cleared since
            this run covers it), or ``None``: another run holds the lease and the pending mark now
            holds ``io`` (the newest turn wins; one re-run, not one per turn).
        """
        token, keys, args = self._begin_call(agent, io)
        return self._begun(agent, token, io, self._try_begin(keys=keys, args=args))

    def try_begin_refine(self, agent: str, io: str) -> Lease | None:
        """Take the agent's lease for the refine run ``io`` (``refine:<request id>``), or make it
        wait in ``rsi:{agent}:pending_refine`` (one waiting refine; a newer request replaces it), where
        :meth:`finish` hands the lease to it ahead of a pending turn."""
        token, keys, args = self._begin_call(agent, io)
        return self._begun(agent, token, io, self._try_begin_refine(keys=keys, args=args))

    def _begin_call(self, agent: str, io: str) -> tuple[str, list[str], list[str | int]]:
        """A new lease token, and the keys and arguments of a begin script for ``(agent, io)`` (the
        shape :meth:`try_begin`, :meth:`try_begin_refine` and ``coord_wire.try_begin`` send)."""
        token = secrets.token_hex(16)
        return token, self._agent_keys(agent), [token, io, self.lease_ms]

    @staticmethod
    def _begun(agent: str, token: str, io: str, reply: Any) -> Lease | None:
        """A begin script's ``reply`` (the new fence, or 0: another run holds the lease) as the
        :class:`Lease` of ``token``, or ``None``."""
        fence = int(reply)
        return Lease(agent, token, fence, io) if fence else None

    def renew(self, lease: Lease) -> bool:
        """Extend the lease to ``lease_s`` from now if it is still ours.

        Returns:
            False if the lease was lost (see the module docstring): the run must stop at once.
        """
        return bool(self._renew(keys=[lease_key(lease.agent)], args=[lease.token, self.lease_ms]))

    def renew_and_spend(self, lease: Lease, day: str) -> tuple[bool, tuple[int, int] | None]:
        """:meth:`renew` and :meth:`spend` of ``(lease.agent, day)`` in one round trip (one script,
        ``EVALSHA``: a pipeline of a script asks ``SCRIPT EXISTS`` first, a round trip more):
        ``(renewed, (agent, cluster) tokens)``; the spend is ``None`` when its read failed alone
        (the caller goes on as with an unreadable spend).

        Raises:
            redis errors: the round trip failed, or the script's reply is an error (as :meth:`renew`).
            ValueError: a spend counter holds no integer (as :meth:`spend`).
        """
        reply = self._renew_spend(keys=[lease_key(lease.agent), spend_key(day, lease.agent), spend_key(day)],
                                  args=[lease.token, self.lease_ms])
        renewed = bool(reply[0])
        if len(reply) != 3:
            return renewed, None
        a, c = reply[1], reply[2]
        return renewed, (int(_text(a) if a is not None else 0), int(_text(c) if c is not None else 0))

    def renew_for_trial(self, lease: Lease, run: str, cand: str | None, day: str | None
                        ) -> tuple[bool, bool, tuple[int, int] | None]:
        """:meth:`renew`, :meth:`is_cancelled` of ``(run, cand)`` (when ``cand`` is given) and
        :meth:`spend` of ``(lease.agent, day)`` (when ``day`` is given) in one round trip (a pipeline,
        not a transaction): ``(renewed, cancelled, (agent, cluster) tokens)``; the spend is ``None``
        when not asked or when its read failed alone, ``cancelled`` False when not asked.

        Raises:
            redis errors: the round trip failed, or a reply other than the spend's is an error.
        """
        pipe = self.client.pipeline(transaction=False)
        self._renew(keys=[lease_key(lease.agent)], args=[lease.token, self.lease_ms], client=pipe)
        if cand is not None:
            pipe.exists(cancel_key(run, cand))
        if day is not None:
            pipe.mget([spend_key(day, lease.agent), spend_key(day)])
        replies = list(pipe.execute(raise_on_error=False))
        renewed = replies.pop(0)
        cancelled = replies.pop(0) if cand is not None else 0
        for reply in (renewed, cancelled):
            if isinstance(reply, Exception):
                raise reply
        spent = replies.pop(0) if day is not None else None
        if isinstance(spent, Exception) or not isinstance(spent, list) or len(spent) != 2:
            return bool(renewed), bool(cancelled), None
        a, c = spent
        return bool(renewed), bool(cancelled), (int(_text(a) if a is not None else 0),
                                                int(_text(c) if c is not None else 0))

    def finish(self, lease: Lease) -> Lease | None:
        """End the run holding ``lease``: release, or hand the lease to one re-run.

        Returns:
            ``None`` if the lease was released (nothing pending) or was no longer ours (nothing is
            changed then). Otherwise the re-run's :class:`Lease` — new token, new fence, ``io`` =
            the pending io, which is cleared: the caller enqueues exactly one re-run with it.
        """
        new_token = secrets.token_hex(16)
        reply = self._finish(keys=self._agent_keys(lease.agent), args=[lease.token, new_token, self.lease_ms])
        return self._lease_reply(lease.agent, new_token, reply)

    def begin_pending(self, agent: str) -> Lease | None:
        """Take a free lease for the agent's pending io (the sweeper, after a run died).

        Returns:
            The new :class:`Lease` for the pending io (cleared), or ``None`` when nothing is pending
            or the lease is held (its holder's ``finish`` will take the pending io).
        """
        token = secrets.token_hex(16)
        reply = self._begin_pending(keys=self._agent_keys(agent), args=[token, self.lease_ms])
        return self._lease_reply(agent, token, reply)

    def lease_holder(self, agent: str) -> LeaseHolder | None:
        """Token and fence of the run holding the agent's lease, or ``None`` if nobody holds it.

        Read atomically (``MGET``); while a lease exists the fence counter is its holder's fence.
        A ``running`` SQL run whose fence differs (or with no holder) has lost its lease.
        """
        token, fence = self.client.mget([lease_key(agent), fence_key(agent)])
        if token is None:
            return None
        return LeaseHolder(_text(token), int(_text(fence)) if fence is not None else 0)

    def delete_lease_if(self, agent: str, token: str) -> bool:
        """Delete the agent's lease if it still holds ``token`` (compare-and-delete)."""
        return bool(self._delete_if(keys=[lease_key(agent)], args=[token]))

    def lease_ttl_ms(self, agent: str) -> int | None:
        """Milliseconds left on the agent's lease (``PTTL``): ``None`` when there is no lease, ``-1``
        when the key has no expiry (never set by this protocol; a leftover the sweeper deletes)."""
        ttl = int(self.client.pttl(lease_key(agent)))
        return None if ttl == -2 else ttl

    def agents_with(self, kind: Literal["lease", "pending", "pending_refine"], *, count: int = 500
                    ) -> Iterator[str]:
        """Agent ids that have a ``rsi:{agent}:lease`` (``kind="lease"``), ``rsi:{agent}:pending`` or
        ``rsi:{agent}:pending_refine`` key.

        Uses ``SCAN`` (never blocks the server): an agent may be reported more than once, and keys
        created or deleted during the iteration may or may not be reported.
        """
        suffix = f":{kind}"
        for raw in self.client.scan_iter(match=f"rsi:*{suffix}", count=count):
            key = _text(raw)
            if len(key) > len("rsi:") + len(suffix):
                yield key[len("rsi:"):-len(suffix)]

    def pending(self, agent: str) -> str | None:
        """The agent's pending io, if any (read only)."""
        value = self.client.get(pending_key(agent))
        return None if value is None else _text(value)

    # --- early-stop bounds ----------------------------------------------------------------------

    def init_bounds(self, run: str, cand: str, R: int, S_star: float, delta: float, S_t: float) -> bool:
        """Create the candidate's bound hash: ``A = B = 0``, ``R`` (total planned weight,
        docs/algorithm/consolidation.md §3.3
        step 13), and ``S★, δ, S_t`` as ``repr`` floats. Idempotent: an existing hash (a
        redelivered launch) is left untouched.

        Returns:
            True if the hash was created by this call.
        """
        args: list[str | int] = [
            _check_int("R", R), _check_float("S_star", S_star), _check_float("delta", delta),
            _check_float("S_t", S_t), self.run_ttl_ms, repr(self.margin),
        ]
        created, _ = self._init_bounds(keys=[bound_key(run, cand), cancel_key(run, cand)], args=args)
        return bool(int(created))

    def report_trial(self, run: str, cand: str, slot: str, passed: int, weight: int) -> bool:
        """Count one finished trial in the candidate's bound, once per ``slot``.

        An ``ok`` trial reports ``passed`` (criteria passed, r·w) of ``weight`` (criteria, w): w moves
        from R to B and ``passed`` is added to A. A ``missing`` trial reports ``(0, 0)``: its weight
        stays in R (docs/algorithm/formulas.md §2.10). A slot already counted (a redelivered task) changes
        nothing. Then
        the cancel flag is set when ``can_stop_exactly`` holds. Bounds never initialised (or
        expired) count nothing and never cancel.

        Args:
            slot: the trial's identity within the candidate, e.g. ``f"{world_id}#{trial}"``.

        Returns:
            Whether the candidate is cancelled now.

        Raises:
            InvalidInput: negative or non-integer values, ``passed > weight``, or ``weight`` larger
                than the remaining R.
        """
        _check_int("passed", passed)
        _check_int("weight", weight)
        if passed > weight:
            raise InvalidInput(f"passed ({passed}) exceeds weight ({weight})")
        keys = [bound_key(run, cand), slots_key(run, cand), cancel_key(run, cand)]
        try:
            reply = self._report(keys=keys, args=[slot, passed, weight, self.run_ttl_ms, repr(self.margin)])
        except redis.ResponseError as exc:
            if "rsi-bounds:" in str(exc):
                raise InvalidInput(str(exc)) from None
            raise
        return bool(int(reply))

    def is_cancelled(self, run: str, cand: str) -> bool:
        """Whether the candidate's cancel flag is set."""
        return bool(self.client.exists(cancel_key(run, cand)))

    def bounds(self, run: str, cand: str) -> Bounds | None:
        """The candidate's stored bound state, or ``None`` if not initialised (or expired)."""
        return self._bounds(self.client.hgetall(bound_key(run, cand)))

    def bound_progress(self, run: str, cand: str) -> tuple[Bounds | None, int]:
        """The candidate's bound state and how many trial slots it counted (one round trip)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(bound_key(run, cand))
        pipe.scard(slots_key(run, cand))
        raw, counted = pipe.execute()
        return self._bounds(raw), int(counted or 0)

    @staticmethod
    def _bounds(raw: Any) -> Bounds | None:
        if not raw:
            return None
        h = {_text(k): _text(v) for k, v in raw.items()}
        return Bounds(int(h["A"]), int(h["B"]), int(h["R"]), float(h["S_star"]), float(h["delta"]),
                      float(h["S_t"]))

    def cleanup_run(self, run: str, candidates: Iterable[str], steps: Iterable[str] = ()) -> int:
        """Delete the run keys of the given candidates and the step claims of the given steps (a late
        step task then finds the run closed and stops); returns the number of keys deleted."""
        keys = [f(run, c) for c in candidates for f in (bound_key, slots_key, cancel_key, wave_key)]
        keys += [f(run, s) for s in steps for f in (dispatch_key, step_key)]
        return int(self.client.delete(*keys)) if keys else 0

    # --- spend ----------------------------------------------------------------------------------

    def spend_add(self, agent: str, tokens: int, day: str) -> tuple[int, int]:
        """Add ``tokens`` to the agent's and the cluster's counters of ``day`` (atomically);
        returns the new ``(agent, cluster)`` totals."""
        reply = self._spend_add(keys=[spend_key(day, agent), spend_key(day)],
                                args=[max(0, int(tokens)), SPEND_TTL_S * 1000])
        return int(reply[0]), int(reply[1])

    def spend(self, agent: str, day: str) -> tuple[int, int]:
        """The ``(agent, cluster)`` tokens spent on ``day``."""
        a, c = self.client.mget([spend_key(day, agent), spend_key(day)])
        return int(_text(a) if a is not None else 0), int(_text(c) if c is not None else 0)

    # --- harness invalidation -------------------------------------------------------------------

    def count_delivery(self, task_id: str) -> int:
        """Count one more delivery of the task ``task_id``; returns the count (1 on the first).

        The counter expires :data:`DELIVERY_TTL_S` after the first delivery. The first delivery is one
        command (``SET NX EX``, the counter and its expiry at once); a redelivery adds an ``INCR``.
        """
        key = delivery_key(_text(task_id))
        if self.client.set(key, 1, nx=True, ex=DELIVERY_TTL_S):
            return 1
        n = int(self.client.incr(key))
        if n == 1:  # it expired between the two commands
            self.client.expire(key, DELIVERY_TTL_S)
        return n

    def publish_harness_change(self, agent: str) -> int:
        """Publish the agent id on :data:`HARNESS_CHANNEL`; returns the number of receivers."""
        return int(self.client.publish(HARNESS_CHANNEL, agent))

    # --- helpers --------------------------------------------------------------------------------

    @staticmethod
    def _agent_keys(agent: str) -> list[str]:
        return [lease_key(agent), pending_key(agent), fence_key(agent), pending_refine_key(agent)]

    @staticmethod
    def _lease_reply(agent: str, token: str, reply: Sequence[Any]) -> Lease | None:
        if int(reply[0]) != 1:
            return None
        return Lease(agent, token, int(reply[2]), _text(reply[1]))
