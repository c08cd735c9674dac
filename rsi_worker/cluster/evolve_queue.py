"""The shared queue of a step's trial batch on the cluster (docs/algorithm/evolve.md#the-batchs-queue).

A step's lanes do not carry their trials: each send pushes its specs onto the batch's queue (a Redis
list, :func:`queue_key`) and publishes lanes that carry the queue's id. A lane takes the next spec,
runs it, and takes again until the queue is empty, so a lane that ends one evaluation's trials goes on
with the next evaluation's (a round's second candidate, sent while the first one's lanes run) in the
same task: no lane's end, no new message and no pick-up between them, and no lane idle while another
lane still holds queued trials.

* **Taking is moving**: :func:`take` moves the spec from the queue to the lane's own list
  (:func:`taken_key`, keyed by the lane's task id) in one command, so a lane killed mid-trial is
  delivered again under the same task id and first runs what it had taken (:func:`taken`); a stored
  slot is answered from its row, so nothing runs or counts twice. The lane drops its list only after
  its join check (:func:`release`).
* **Every spec has a lane**: a send pushes before it publishes, and publishes as many lanes as it
  would without the queue, so each spec pushed has lanes sent after it; a lane that finds the queue
  empty at once ran nothing and ends without a join check (the lanes that stored rows each check after
  their last row, the step after its seal: the last row's lane sees the batch complete, as before).
* Keys expire after :data:`QUEUE_TTL_S` (an emptied Redis list is gone at once). A lost queue (a Redis
  restart) leaves its trials unstored: the run is resumed by the sweeper, whose new step runs them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rsi_worker.cluster.evolve_watch import holder

__all__ = ["QUEUE_TTL_S", "lane_specs", "push", "queue_key", "release", "take", "taken", "taken_key"]

QUEUE_TTL_S = 86_400
"""How long a batch's queue and a lane's taken list are kept at most (far beyond any round)."""


def queue_key(name: str, queue_id: str) -> str:
    """The Redis list of batch ``queue_id``'s specs not taken yet (oldest at the right end)."""
    return f"rsi:{holder(name)}:queue:{queue_id}"


def taken_key(name: str, queue_id: str, lane: str) -> str:
    """The Redis list of the specs lane ``lane`` (its task id) took from the queue."""
    return f"{queue_key(name, queue_id)}:lane:{lane}"


def push(client: Any, name: str, queue_id: str, specs: Sequence[Mapping[str, Any]]) -> None:
    """Append ``specs`` to the queue, in order (one round trip)."""
    if not specs:
        return
    key = queue_key(name, queue_id)
    pipe = client.pipeline(transaction=False)
    pipe.lpush(key, *(json.dumps(dict(s), separators=(",", ":")) for s in specs))
    pipe.expire(key, QUEUE_TTL_S)
    pipe.execute()


def take(client: Any, name: str, queue_id: str, lane: str) -> dict[str, Any] | None:
    """Move the oldest spec of the queue to ``lane``'s taken list and return it; ``None`` when the
    queue is empty (one round trip)."""
    mine = taken_key(name, queue_id, lane)
    pipe = client.pipeline(transaction=False)
    pipe.rpoplpush(queue_key(name, queue_id), mine)
    pipe.expire(mine, QUEUE_TTL_S)
    raw, _ = pipe.execute()
    return None if raw is None else dict(json.loads(raw))


def taken(client: Any, name: str, queue_id: str, lane: str) -> list[dict[str, Any]]:
    """The specs ``lane`` took before (a redelivered lane: what its first delivery may not have run),
    oldest first."""
    raws = client.lrange(taken_key(name, queue_id, lane), 0, -1)
    return [dict(json.loads(r)) for r in reversed(raws)]


def release(client: Any, name: str, queue_id: str, lane: str) -> None:
    """Drop ``lane``'s taken list (after its join check)."""
    client.delete(taken_key(name, queue_id, lane))


def lane_specs(
    client: Any, name: str, queue_id: str | None, lane: str, own: Sequence[Mapping[str, Any]] = ()
) -> Iterator[dict[str, Any]]:
    """What a lane runs, in order: its ``own`` specs (a lane sent with its specs), then — with a queue —
    what an earlier delivery of it took (:func:`taken`), then each spec it takes until the queue is
    empty. Taken lazily: a spec is taken only when the lane is ready to run it."""
    yield from (dict(s) for s in own)
    if not queue_id:
        return
    yield from taken(client, name, queue_id, lane)
    while (spec := take(client, name, queue_id, lane)) is not None:
        yield spec
