"""Evaluating one harness on a split (docs/algorithm/evolve.md#evaluation): trial order, early stop, the
re-run of missing trials.

* **Trial order**: the ``(task, trial)`` slots shuffled with ``random.Random(seed)`` (:func:`slot_order`),
  the same order for every candidate of every round.
* **Trials** run in that order on the round's shared slots (``pool``, :mod:`rsi_worker.evolve.slots`: a
  slot is refilled as each trial ends), else on ``parallel`` threads of their own; a stored slot is never
  run again (the trial rows are idempotent), so a killed run resumes from its last stored trial.
* **Early stop** (production only; ``stop`` given): before a trial starts, the exact bound
  (docs/algorithm/formulas.md §2.10) is checked over the rows stored so far, a missing trial counting
  as unknown weight; once rejection at the floor is certain the remaining slots are stored
  ``cancelled`` (which trials ran before the stop may vary with timing; the decision never does).
* **Missing trials** are run once more (``attempt = 1``); the latest attempt of a slot counts.

The trial rows come back in the shape :func:`rsi_worker.consolidate.evaluate.assemble` reads.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rsi_common.math import can_stop_exactly
from rsi_worker.consolidate.evaluate import StopContext, bound_total
from rsi_worker.evolve.slots import TRIAL, SlotPool
from rsi_worker.evolve.store import Store

__all__ = ["EvalJob", "SlotRunner", "bounds", "evaluate", "latest_rows", "slot_order"]

SlotRunner = Callable[[str, int], dict[str, Any]]
"""``(task_id, seed) → trial values``: one trial of the candidate being evaluated."""


def slot_order(task_ids: Sequence[str], k: int, seed: int) -> list[tuple[str, int]]:
    """Every ``(task, trial)`` slot, shuffled with ``random.Random(seed)`` (from tasks in the given order)."""
    slots = [(task, j) for task in task_ids for j in range(k)]
    random.Random(seed).shuffle(slots)
    return slots


@dataclass(frozen=True)
class EvalJob:
    """One evaluation: the run, round, candidate label, the split and its checks, and the slot seeds
    (``seed_base + trial``; the base evaluations of H0 use ``r·k`` so repeats differ)."""

    evolve: str
    t: int
    candidate: str
    task_ids: tuple[str, ...]
    checks: Mapping[str, Sequence[Any]]
    k: int
    order_seed: int
    seed_base: int = 0


def latest_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per slot, its row of the highest attempt."""
    best: dict[tuple[str, int], Mapping[str, Any]] = {}
    for r in rows:
        key = (str(r["world_id"]), int(r["trial"]))
        if key not in best or int(r.get("attempt", 0)) > int(best[key].get("attempt", 0)):
            best[key] = r
    return [dict(r) for r in best.values()]


def bounds(job: EvalJob, rows: Sequence[Mapping[str, Any]]) -> tuple[int, int, int]:
    """The early-stop state ``(A, B, R)`` of the job's stored rows (latest attempt per slot)."""
    ok = [r for r in latest_rows(rows) if r["status"] == "ok"]
    A = sum(int((r.get("result") or {}).get("passed", 0)) for r in ok)
    B = sum(int(r.get("weight") or 0) for r in ok)
    return A, B, bound_total(list(job.task_ids), job.checks, job.k) - B


def evaluate(
    store: Store,
    job: EvalJob,
    run_slot: SlotRunner,
    *,
    parallel: int = 1,
    stop: StopContext | None = None,
    rerun_missing: bool = True,
    defer: Callable[[list[tuple[str, int, int]]], None] | None = None,
    pool: SlotPool | None = None,
) -> list[dict[str, Any]] | None:
    """Run the job's missing slots (module docstring); returns the latest row of every slot.

    ``defer`` (the cluster): instead of running the slots still to run, hand them as
    ``(task, trial, attempt)`` to ``defer`` and return ``None``; the caller calls again once they
    are stored (the early stop and the re-run are decided here, from the stored rows, either way).
    ``pool``: the round's shared trial slots (then ``parallel`` is not used).
    """
    order = slot_order(job.task_ids, job.k, job.order_seed)
    rows = store.trials(job.evolve, job.t, job.candidate)
    done = {(str(r["world_id"]), int(r["trial"]), int(r.get("attempt", 0))) for r in rows}

    lock = threading.Lock()

    def stopped() -> bool:
        if stop is None:
            return False
        with lock:
            A, B, R = bounds(job, rows)
        return can_stop_exactly(A, B, R, stop.S_star, stop.delta, stop.S_t)

    def one(slot: tuple[str, int], attempt: int) -> None:
        if attempt == 0 and stopped():  # cooperative early stop: a queued slot is skipped
            return
        task, j = slot
        values = run_slot(task, job.seed_base + j)
        row, _ = store.save_trial(job.evolve, job.t, job.candidate, task, j, attempt, values)
        with lock:
            rows.append(row)

    def run_all(slots: Sequence[tuple[str, int]], attempt: int) -> None:
        if pool is not None:
            pool.map(lambda s: one(s, attempt), list(slots), TRIAL)
            return
        if parallel <= 1 or len(slots) <= 1:
            for s in slots:
                one(s, attempt)
            return
        with ThreadPoolExecutor(max_workers=min(parallel, len(slots))) as ex:
            list(ex.map(lambda s: one(s, attempt), slots))

    if any(r["status"] == "cancelled" for r in rows):
        return latest_rows(rows)
    first = [s for s in order if (s[0], s[1], 0) not in done]
    if defer is not None and first and not stopped():
        defer([(task, j, 0) for task, j in first])
        return None
    run_all(first, 0)
    if stopped():
        seen = {(str(r["world_id"]), int(r["trial"])) for r in rows}
        for task, j in order:
            if (task, j) not in seen:
                row, _ = store.save_trial(
                    job.evolve,
                    job.t,
                    job.candidate,
                    task,
                    j,
                    0,
                    {"status": "cancelled", "result": {"reason": "early stop"}},
                )
                rows.append(row)
        return latest_rows(rows)
    if rerun_missing:
        again = [
            (str(r["world_id"]), int(r["trial"]))
            for r in latest_rows(rows)
            if r["status"] == "missing" and int(r.get("attempt", 0)) == 0
        ]
        again.sort(key=order.index)
        again = [s for s in again if (s[0], s[1], 1) not in done]
        if defer is not None and again:
            defer([(task, j, 1) for task, j in again])
            return None
        run_all(again, 1)
    return latest_rows(rows)
