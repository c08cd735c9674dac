"""A candidate's second wave on the cluster, sent when its first wave releases it
(docs/performance/consolidation.md#trial-order).

A passed draft (``draft_candidate``) replaces itself with its **first wave** (``waves.wave_size``
trials, each told the wave's size) and one **gate** (``release_wave``); no second-wave trial is sent
yet, so none holds a worker thread while it waits. The second wave is sent by whichever comes first:

* the first-wave trial whose result releases it (``waves.release_due``: a criterion passed, the
  candidate cancelled, every first-wave slot counted), right after storing its own row;
* the gate, which looks at the candidate's state in Redis every :data:`GATE_POLL_S` without holding a
  thread (it ends and sends its successor with a countdown: ``middleware.Resend``) and sends the wave
  itself when it is released or when ``early_stop_wave_s`` has passed since the launch (a first wave
  that never counts — a trial that failed without a row, or hangs — still lets the second run).

**Exactly one sender**, by one Redis key per candidate, ``rsi:run:{run}:wave:{candidate}``:

=========================  =============================================================================
absent                     not released yet: a sender takes it with its Celery task id (``SET NX``)
``<task id>``              claimed: that task is sending. The same task id — a redelivery of the message
                           of a worker killed between the claim and the send — takes it again
                           (re-entrant), so a claim never strands the wave; any other task stops
``sent:<task id>``         sent: nobody sends again (a redelivered claimer included)
=========================  =============================================================================

The second wave's trials are added to the chord of the sender (Celery's ``add_to_chord``, which
raises the chord's expected size before each send): the sender is a member of the candidate's chord
(the group the draft replaced itself with, itself one member of the draft chord) and has not returned
yet, so that chord cannot complete before the second wave's tasks are counted, and the judge (the
draft chord's body) waits for them as before. A worker killed after sending part of
the wave and before marking it sent makes its redelivery send the wave again: the chord's size is
then larger than its members (it never fires; the in-band join — ``rsi_worker.consolidate.join``,
which counts the candidate's full slot plan from the stored rows — starts the judge), and the
duplicate trials find their slots stored or insert nothing (slot keys): never an early judge, never a
trial counted twice. The second wave's trials run inside ``waves.released``: they do not wait again;
a cancelled candidate's trials store ``cancelled`` when they start, without a model call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from rsi_common.coord import wave_key
from rsi_common.db import get_run
from rsi_worker.cluster.join import claim_owned, drop_owned
from rsi_worker.consolidate.context import Deps, RoundContext
from rsi_worker.consolidate.waves import release_due

__all__ = ["GATE_POLL_S", "claim_release", "gate_due", "mark_sent", "release_key", "second_wave",
           "send_second_wave", "wave_ttl_s"]

log = logging.getLogger(__name__)

GATE_POLL_S = 0.5
"""Seconds between two looks of the gate at its candidate (a message with a countdown, no thread)."""

_MARK_SENT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[1], 'sent:' .. ARGV[1], 'EX', ARGV[2])
    return 1
end
return 0
"""


def release_key(run_id: str, candidate: str) -> str:
    """The candidate's release claim (module docstring); deleted with the run's other keys when the
    run closes (``Coordinator.cleanup_run``)."""
    return wave_key(run_id, candidate)


def wave_ttl_s(deps: Deps) -> int:
    """Seconds the release claim lives: twice a task's hard time limit plus the wave's bound, so it
    outlives every first-wave trial and the gate of its run."""
    s = deps.settings
    return int(2 * s.task_time_limit_s + deps.params.early_stop_wave_s) + 60


def claim_release(client: redis.Redis, run_id: str, candidate: str, owner: str, ttl_s: int) -> bool:
    """Take (or, for the same ``owner``, keep) the right to send the candidate's second wave; False
    when another task holds it or the wave was sent (module docstring)."""
    return claim_owned(client, release_key(run_id, candidate), owner, ttl_s)


def mark_sent(client: redis.Redis, run_id: str, candidate: str, owner: str, ttl_s: int) -> bool:
    """Record that ``owner`` sent the wave (only if it holds the claim); True when recorded."""
    return bool(client.eval(_MARK_SENT, 1, release_key(run_id, candidate), owner, ttl_s))


def second_wave(deps: Deps, run_id: str, candidate: str, wave: int) -> list[dict[str, Any]] | None:
    """The candidate's slots after its first ``wave`` (JSON, plan order), read from the run's stored
    context in a read transaction; ``None`` when the run is no longer running."""
    with deps.sessions() as session:
        session.connection(execution_options={"sqlite_begin": "DEFERRED"})  # a read: no write turn
        run = get_run(session, run_id)
        status, params = str(run.status), run.params
        session.commit()
    if status != "running":
        return None
    plan = RoundContext.from_json(params or {}).slots.get(candidate) or []
    return [dict(s) for s in plan[max(0, wave):]]


def send_second_wave(deps: Deps, run_id: str, candidate: str, wave: int, owner: str,
                     send: Callable[[Sequence[Mapping[str, Any]]], None]) -> bool:
    """Send the candidate's second wave once (module docstring): claim, read the slots, ``send`` them
    (the caller adds them to its chord), mark sent. Returns whether this call sent it; a run
    found closed sends nothing and drops the claim (its keys were deleted at the close: none is left
    behind). Raises what the
    claim, the read or ``send`` raise (the caller's redelivery retries under the same claim)."""
    client, ttl = deps.coord.client, wave_ttl_s(deps)
    if not claim_release(client, run_id, candidate, owner, ttl):
        return False
    slots = second_wave(deps, run_id, candidate, wave)
    if slots is None:  # the run closed (its keys were cleaned up): leave no claim behind
        drop_owned(client, release_key(run_id, candidate), owner)
        return False
    if slots:
        send(slots)
    mark_sent(client, run_id, candidate, owner, ttl)
    log.info("run %s: second wave of %s sent (%d trials) by %s", run_id, candidate, len(slots), owner)
    return True


def gate_due(deps: Deps, run_id: str, candidate: str, wave: int, deadline: float,
             now: Callable[[], float] = time.time) -> bool | None:
    """The gate's look: True when it is to send the wave now (released, or ``deadline`` — epoch
    seconds — passed), None when there is nothing left to do (sent already), False to look again."""
    value = deps.coord.client.get(release_key(run_id, candidate))
    if value is not None and (value.decode() if isinstance(value, bytes) else str(value)).startswith("sent:"):
        return None
    if now() >= deadline:
        return True
    bounds, counted = deps.coord.bound_progress(run_id, candidate)
    return release_due(None, bounds, counted, wave, deps.coord.is_cancelled(run_id, candidate))
