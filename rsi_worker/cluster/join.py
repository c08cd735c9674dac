"""Claims that keep a run's steps single when they are started more than once
(docs/operations/failure-recovery.md#in-band-join).

A step task (``after_incumbent``, ``judge_round``) may be started by its chord, by the in-band join
of the member that stored the fan-out's last result (:func:`rsi_worker.consolidate.join.ready_step`)
and by the sweeper's resume of a stalled run. Two Redis keys keep that to one execution:

=====================================  ==================================================================
``rsi:run:{run}:join:{step}``          ``"1"`` once an in-band join or the sweeper dispatched ``step``:
                                       the dispatch claim (``SET NX``); TTL :func:`claim_ttl_s`
``rsi:run:{run}:step:{step}``          the Celery task id executing ``step``: the execution claim,
                                       re-entrant for the same task id (a redelivery of the message of
                                       a worker that died mid-step); TTL :func:`claim_ttl_s`
=====================================  ==================================================================

A second step task with another id finds the claim held and stops (the first one writes the
outcome). The run's close deletes both keys (``Coordinator.cleanup_run``): a late chord body then
takes a fresh claim and finds the run closed, so it stops; otherwise they expire on their own.
After a Redis restart they are gone; a duplicate step then
recomputes the same decision from stored rows and the fenced final write applies once
(docs/architecture.md invariant 8).
"""

from __future__ import annotations

import logging

import redis

from rsi_common.config import Settings
from rsi_common.coord import dispatch_key, step_key

__all__ = ["claim_dispatch", "claim_owned", "claim_step", "claim_ttl_s", "dispatch_key", "drop_owned",
           "release_step", "step_key"]

log = logging.getLogger(__name__)

_CLAIM_OWNED = """
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    return 1
end
if v then
    return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""


_DROP_OWNED = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


def claim_ttl_s(settings: Settings) -> int:
    """Seconds a claim lives: the hard task time limit (a step cannot run longer) plus a minute."""
    return int(settings.task_time_limit_s) + 60


def claim_dispatch(client: redis.Redis, run_id: str, step: str, ttl_s: int) -> bool:
    """Take the dispatch claim of ``step``; False: somebody dispatched it already."""
    return bool(client.set(dispatch_key(run_id, step), "1", nx=True, ex=ttl_s))


def claim_step(client: redis.Redis, run_id: str, step: str, task_id: str, ttl_s: int) -> bool:
    """Take (or, for the same ``task_id``, keep) the execution claim of ``step``.

    Returns:
        False when another task holds it: the caller stops without running the step.
    """
    return claim_owned(client, step_key(run_id, step), task_id, ttl_s)


def release_step(client: redis.Redis, run_id: str, step: str, task_id: str) -> bool:
    """Give back the execution claim of ``step`` if ``task_id`` holds it; True when it was deleted."""
    return drop_owned(client, step_key(run_id, step), task_id)


def claim_owned(client: redis.Redis, key: str, owner: str, ttl_s: int) -> bool:
    """Take ``key`` for ``owner`` (``SET NX`` with ``ttl_s`` seconds), or renew it when ``owner``
    holds it already (re-entrant: a redelivered task keeps its claim); False when another holds it."""
    return bool(client.eval(_CLAIM_OWNED, 1, key, owner, ttl_s))


def drop_owned(client: redis.Redis, key: str, owner: str) -> bool:
    """Delete ``key`` if ``owner`` holds it; True when it was deleted."""
    return bool(client.eval(_DROP_OWNED, 1, key, owner))
