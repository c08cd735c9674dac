"""A step's trial batch sent before it is whole and sealed after the fact
(docs/algorithm/evolve.md#on-the-cluster).

A step sends each evaluation's deferred trials as soon as the engine knows them (a candidate's once its
smoke passed, the previous winner's held-out ones at the round's start), while it still drafts and
smokes the other candidates. Those early lanes carry only the batch id: their slots are not the whole
batch, so a join on them alone would fire on the first candidate's slots. When the step's engine work
is done it **seals** the batch: it writes the batch's every slot under :func:`seal_key` (Redis, kept a
day), sends the slots not yet sent (those lanes carry the sealed batch), then checks the join itself.

* A lane of an unsealed batch that finds no seal stops after its trials: the step's own check after
  sealing sees its row (the lane stored its row before reading the seal; the step wrote the seal
  before reading the rows), so one of the two always sees the batch complete.
* The step that finds its batch complete at the seal claims it with its own task id and judges in the
  same task (no hop, no reload); a lane that also saw it complete sends a step that stops
  (``joined already``), as two lanes of a sealed batch already could.
* A lane whose trial raised marks the batch failed (:func:`mark_failed`) before it reads the seal: a
  sealed batch gets its step at once (as before); an unsealed one is picked up by the step's check.

Nothing here counts completions: the seal is a fixed list, the join is still decided from SQL
(:func:`rsi_worker.evolve.join.joined`), so a lost message or a redelivered lane finishes the batch as
before and a stored trial is never counted twice.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from rsi_worker.cluster.evolve_watch import holder
from rsi_worker.evolve.join import batch_of

__all__ = ["SEAL_TTL_S", "Fanout", "failed", "mark_failed", "seal", "seal_key", "sealed_batch"]

SEAL_TTL_S = 86_400
"""How long a sealed batch and a failure mark are kept (far beyond any round)."""


def seal_key(name: str, batch_id: str) -> str:
    """The Redis key holding batch ``batch_id`` of run ``name`` once sealed (JSON of :func:`batch_of`)."""
    return f"rsi:{holder(name)}:batch:{batch_id}"


def seal(client: Any, name: str, batch: Mapping[str, Any]) -> None:
    """Store the whole ``batch`` (``{id, slots, stops}``) under its seal key."""
    text = json.dumps(dict(batch), separators=(",", ":"))
    client.set(seal_key(name, str(batch["id"])), text, ex=SEAL_TTL_S)


def sealed_batch(client: Any, name: str, batch: Mapping[str, Any]) -> dict[str, Any] | None:
    """The whole batch a lane's ``batch`` names: itself when it carries its slots (sent sealed), else
    the stored seal, else ``None`` (not sealed yet: the step checks the join after sealing)."""
    if "slots" in batch:
        return dict(batch)
    raw = client.get(seal_key(name, str(batch["id"])))
    return None if raw is None else dict(json.loads(raw))


def mark_failed(client: Any, name: str, batch_id: str) -> None:
    """Mark that a lane of the batch raised (the step that seals it then goes on at once)."""
    client.set(seal_key(name, batch_id) + ":failed", "1", ex=SEAL_TTL_S)


def failed(client: Any, name: str, batch_id: str) -> bool:
    """Whether a lane of the batch raised (:func:`mark_failed`)."""
    return bool(client.exists(seal_key(name, batch_id) + ":failed"))


class Fanout:
    """One step's batch: ``early`` sends an evaluation's specs at once as lanes carrying the batch id
    (safe from the engine's threads); :meth:`seal` stores the whole batch and sends what was not sent.

    ``send(specs, batch)`` sends ``specs`` as lanes carrying ``batch`` (the id alone, or the sealed
    batch)."""

    def __init__(self, send: Callable[[list[dict[str, Any]], dict[str, Any]], None]) -> None:
        self.id = uuid.uuid4().hex[:16]
        self.sent: list[dict[str, Any]] = []
        self._send = send
        self._lock = threading.Lock()

    def early(self, specs: list[dict[str, Any]]) -> None:
        """Send ``specs`` now, before the batch is whole."""
        if not specs:
            return
        with self._lock:
            self._send(list(specs), {"id": self.id})
            self.sent.extend(specs)

    def seal(self, client: Any, name: str, specs: list[dict[str, Any]]) -> dict[str, Any]:
        """Seal the batch of every deferred ``specs`` (those sent early among them), then send the rest;
        returns the sealed batch."""
        batch = {**batch_of(specs), "id": self.id}
        with self._lock:
            if self.sent:
                seal(client, name, batch)
            early = {_slot(x) for x in self.sent}
            out = [s for s in specs if _slot(s) not in early]
            if out:
                self._send(out, batch)
        return batch


def _slot(spec: Mapping[str, Any]) -> tuple[int, str, str, int, int]:
    t, trial, attempt = int(spec["t"]), int(spec["trial"]), int(spec["attempt"])
    return (t, str(spec["candidate"]), str(spec["task"]), trial, attempt)
