"""Tree budgets in Redis: reservations and the day's counters (docs/runtime/accounting.md#reservation).

SQL (``rsi_spend``) is the truth; Redis holds a per-day mirror of it so a turn can reserve in one
round trip:

* ``rsi:tree:{r}:spent:{day}`` and ``rsi:{a}:spent:{day}`` mirror the committed charges. A missing
  counter is rebuilt from SQL by one script that writes it only if it is still absent (``SET NX``
  semantics), and :meth:`Budget.settle` adds to a counter only if it exists, so a rebuilt counter is
  never counted twice. A charge committed between the SQL read of a rebuild and the rebuild itself
  is missed by the counter until it expires (3 days) or is flushed: a bounded under-count, written
  down in docs/runtime/accounting.md.
* ``rsi:tree:{r}:reserve`` holds the outstanding reservations (``agent|tokens|expires_ms``); an
  expired one (a crashed attempt) is dropped by the next reservation of the tree.

The ``reserve`` script grants the smallest of the wanted tokens, the tree's and the agent's
remaining tokens, an extra limit (the goal's or the autonomy loop's remainder) and the remaining
USD ÷ the model's output price, all net of the tree's outstanding reservations. A grant of 0
refuses the turn and names the binding limit. A repeated reservation with the same id returns the
first grant (a redelivered turn does not reserve twice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.runtime import keys
from rsi_common.runtime.caps import Caps, DayTotals
from rsi_common.runtime.prices import Price, usd_micro
from rsi_common.runtime.spend import Charge, agent_totals, tree_totals

__all__ = ["Budget", "Grant"]

_RESERVE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1, 'rebuild'}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local first = redis.call('HGET', KEYS[3], ARGV[1])
if first then
  local _, tok = string.match(first, '^(.*)|(%d+)|(%d+)$')
  return {tonumber(tok), 'again'}
end
local tree_res, agent_res = 0, 0
local all = redis.call('HGETALL', KEYS[3])
for i = 1, #all, 2 do
  local a, tok, exp = string.match(all[i + 1], '^(.*)|(%d+)|(%d+)$')
  if tonumber(exp) <= now then
    redis.call('HDEL', KEYS[3], all[i])
  else
    tree_res = tree_res + tonumber(tok)
    if a == ARGV[2] then agent_res = agent_res + tonumber(tok) end
  end
end
local grant = tonumber(ARGV[3])
local dim = 'reserve'
local function lower(v, d)
  if v < grant then grant = v; dim = d end
end
local tree_cap = tonumber(ARGV[4])
if tree_cap >= 0 then
  lower(tree_cap - tonumber(redis.call('HGET', KEYS[1], 'tokens') or '0') - tree_res, 'tokens')
end
local agent_cap = tonumber(ARGV[5])
if agent_cap >= 0 then
  lower(agent_cap - tonumber(redis.call('HGET', KEYS[2], 'tokens') or '0') - agent_res, 'agent_tokens')
end
local usd_cap = tonumber(ARGV[6])
local price = tonumber(ARGV[7])
if usd_cap >= 0 and price > 0 then
  local left = usd_cap - tonumber(redis.call('HGET', KEYS[1], 'usd_micro') or '0') - tree_res * price
  lower(math.floor(left / price), 'usd')
end
local extra = tonumber(ARGV[8])
if extra >= 0 then lower(extra, 'budget') end
if grant <= 0 then return {0, dim} end
local ttl = tonumber(ARGV[9])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2] .. '|' .. grant .. '|' .. (now + ttl))
if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
return {grant, dim}
"""

_SETTLE = """
if ARGV[1] ~= '' then redis.call('HDEL', KEYS[3], ARGV[1]) end
local ttl = tonumber(ARGV[7])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'usd_micro', ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'turns', ARGV[4])
  redis.call('HINCRBY', KEYS[1], 'spawns', ARGV[5])
  redis.call('HINCRBY', KEYS[1], 'messages', ARGV[6])
  redis.call('EXPIRE', KEYS[1], ttl)
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HINCRBY', KEYS[2], 'tokens', ARGV[2])
  redis.call('EXPIRE', KEYS[2], ttl)
end
return 1
"""

_SEED = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
"""


@dataclass(frozen=True)
class Grant:
    """A reservation's outcome: ``tokens`` granted (0 = refused) and the limit that bound it
    (``reserve`` when the full reservation was granted; ``tokens``, ``agent_tokens``, ``usd``,
    ``budget``, or ``unpriced`` for an unpriced model under a USD cap)."""

    tokens: int
    dim: str

    @property
    def refused(self) -> bool:
        return self.tokens <= 0


def _arg(cap: float | None) -> str:
    return "-1" if cap is None else str(int(cap))


class Budget:
    """Reservations and day counters of trees.

    Args:
        client: Redis client (``decode_responses`` either way).
        factory: session factory of the SQL store (read only when a counter is rebuilt).
    """

    def __init__(self, client: redis.Redis | Any, factory: sessionmaker[Session]) -> None:
        self.redis = client
        self.factory = factory
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)
        self._seed_script = client.register_script(_SEED)

    def rebuild(self, root: str, agent: str, day: str) -> None:
        """Write the day's counters of ``root`` and ``agent`` from SQL if they are absent."""
        with self.factory() as session:
            tree = tree_totals(session, root, day)
            mine = agent_totals(session, agent, day)
        self._seed_script(keys=[keys.tree_spent(root, day)], args=[
            keys.SPENT_TTL_S, "tokens", tree.tokens, "usd_micro", usd_micro(tree.usd), "turns", tree.turns,
            "spawns", tree.spawns, "messages", tree.messages])
        self._seed_script(keys=[keys.agent_spent(agent, day)], args=[keys.SPENT_TTL_S, "tokens", mine])

    def totals(self, root: str, agent: str, day: str) -> DayTotals:
        """The day's committed spend of the tree, with ``agent_tokens`` of ``agent``."""
        tk, ak = keys.tree_spent(root, day), keys.agent_spent(agent, day)
        if not self.redis.exists(tk) or not self.redis.exists(ak):
            self.rebuild(root, agent, day)
        tree = {_s(k): int(v) for k, v in self.redis.hgetall(tk).items()}
        return DayTotals(tokens=tree.get("tokens", 0), agent_tokens=int(self.redis.hget(ak, "tokens") or 0),
                         usd=tree.get("usd_micro", 0) / 1_000_000, turns=tree.get("turns", 0),
                         spawns=tree.get("spawns", 0), messages=tree.get("messages", 0))

    def reserve(self, *, res_id: str, root: str, agent: str, day: str, want: int, caps: Caps,
                price: Price | None, extra: int | None = None, ttl_s: float = 60.0) -> Grant:
        """Reserve up to ``want`` tokens for one turn attempt.

        Args:
            res_id: the reservation's id (the attempt's io and attempt number); a repeat returns the
                first grant.
            root: the tree's root.
            agent: the agent that runs the turn.
            day: the UTC day (database clock).
            want: ``TURN_RESERVE_TOKENS``.
            caps: the tree's caps.
            price: the model's price (``None`` = unpriced).
            extra: the goal's or the autonomy loop's remaining tokens (``None`` = none).
            ttl_s: how long the reservation holds if never settled (a crashed attempt).
        """
        if caps.usd is not None and price is None:
            return Grant(0, "unpriced")
        price_out = 0 if price is None else max(price)
        args: list[str | int] = [res_id, agent, int(want), _arg(caps.tokens), _arg(caps.agent_tokens),
                _arg(None if caps.usd is None else caps.usd * 1_000_000),
                repr(float(price_out)), _arg(extra), int(ttl_s * 1000)]
        ks = [keys.tree_spent(root, day), keys.agent_spent(agent, day), keys.tree_reserve(root)]
        for _ in range(2):
            tokens, dim = self._reserve(keys=ks, args=args)
            if int(tokens) >= 0:
                return Grant(int(tokens), _s(dim))
            self.rebuild(root, agent, day)
        raise RuntimeError("budget counters vanished twice while reserving")  # pragma: no cover

    def settle(self, res_id: str, root: str, day: str, charge: Charge | None, agent: str) -> None:
        """Drop reservation ``res_id`` (``""`` = none) and add a committed ``charge`` to the counters.

        Call it once per charge that :func:`~rsi_common.runtime.spend.charge` inserted, after its
        transaction committed."""
        c = charge or Charge("", "turn", root, agent)
        args: list[str | int] = [res_id, int(c.tokens), usd_micro(c.usd), c.turns, c.spawns, c.messages,
                                 keys.SPENT_TTL_S]
        self._settle(keys=[keys.tree_spent(root, day), keys.agent_spent(agent, day), keys.tree_reserve(root)],
                     args=args)

    def release(self, res_id: str, root: str) -> None:
        """Drop a reservation that will not be settled (the turn refused before running)."""
        self.redis.hdel(keys.tree_reserve(root), res_id)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
