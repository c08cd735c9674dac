"""The in-band join of a step's trial fan-out on the cluster (docs/algorithm/evolve.md#on-the-cluster).

A step that defers trials sends them with a **batch** — the slot keys it waits for and, per candidate
with an early stop, the stop's context — instead of a Celery chord. Each trial, once its slot is
resolved, asks :func:`joined` whether every slot of its batch is: a slot is resolved when its row is
stored, or (attempt 0 of a candidate evaluated with an early stop) when the exact bound over the
candidate's stored rows already rejects it (a cooperative skip stores nothing; the next step stores
the slot ``cancelled``). The trial that sees the batch complete sends the next step. Nothing counts
completions outside SQL, so no counter or chord message can be lost between the trials and the step:
a lost step message is sent again by any redelivered trial of the batch, and two trials that both see
the batch complete send two steps of which the first to claim the batch runs
(:mod:`rsi_worker.cluster.evolve_tasks`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from rsi_common.math import can_stop_exactly
from rsi_worker.evolve.evaluation import EvalJob, bounds
from rsi_worker.evolve.memo import MEMO
from rsi_worker.evolve.store import Store

__all__ = ["batch_of", "joined"]

Slot = tuple[int, str, str, int, int]
"""``(t, candidate, task, trial, attempt)``: a trial row's key within its run."""


def batch_of(specs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The batch of a step's deferred ``specs``: ``{id, slots, stops}`` (``stops``: per ``t/candidate``
    evaluated with an early stop, ``[S★, δ, S_t, k, split]``). Sent with each trial of the fan-out."""
    stops: dict[str, list[Any]] = {}
    for s in specs:
        if s.get("stop"):
            stops[f"{int(s['t'])}/{s['candidate']}"] = [
                *s["stop"],
                int(s["k"]),
                str(s.get("split") or "evolve"),
            ]
    return {
        "id": uuid.uuid4().hex[:16],
        "slots": [
            [int(s["t"]), str(s["candidate"]), str(s["task"]), int(s["trial"]), int(s["attempt"])]
            for s in specs
        ],
        "stops": stops,
    }


def joined(store: Store, name: str, batch: Mapping[str, Any], suite_key: str | None = None) -> bool:
    """Whether every slot of ``batch`` is resolved in SQL (module docstring): one read of the stored keys
    (and, only while a slot is missing, of the rows of its candidate evaluated with an early stop)."""
    slots: list[Slot] = [(int(t), str(c), str(k), int(j), int(a)) for t, c, k, j, a in batch["slots"]]
    stored = store.trial_keys(name, sorted({s[0] for s in slots}))
    stops: Mapping[str, Sequence[Any]] = batch.get("stops") or {}
    rejected: dict[str, bool] = {}
    for slot in slots:
        if slot in stored:
            continue
        t, cand, _, _, attempt = slot
        key = f"{t}/{cand}"
        if attempt != 0 or key not in stops:
            return False
        if key not in rejected:
            S_star, delta, S_t, k, split = stops[key]
            static = MEMO.static(store.sessions, name, suite_key)
            ids = static.heldout_ids if split == "heldout" else static.evolve_ids
            job = EvalJob(name, t, cand, tuple(ids), static.checks, int(k), static.config.seed)
            A, B, R = bounds(job, store.trials(name, t, cand))
            rejected[key] = can_stop_exactly(A, B, R, float(S_star), float(delta), float(S_t))
        if not rejected[key]:
            return False
    return True
