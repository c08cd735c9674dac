"""Running a whole consolidation in one process (``rsi consolidate --inline``, tests, embedded).

The steps are the same functions the Celery tasks call; only the fan-out differs: here trials
and drafts go through a :class:`TrialExecutor` (a thread pool by default) instead of chords.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed, wait
from typing import Any, Protocol, TypeVar

from rsi_common.coord import Lease
from rsi_common.errors import CoordinationError
from rsi_common.stored import error_record
from rsi_worker.consolidate.context import Deps
from rsi_worker.consolidate.drafting import draft_step, launch_candidate
from rsi_worker.consolidate.evaluate import TrialSlot
from rsi_worker.consolidate.finalize import finalize, settle_lease
from rsi_worker.consolidate.incumbent import after_incumbent
from rsi_worker.consolidate.judging import judge_round
from rsi_worker.consolidate.opening import KIND_CONSOLIDATE, Next, open_run
from rsi_worker.consolidate.result import ConsolidationResult
from rsi_worker.consolidate.trials import run_trial

__all__ = ["NotOpened", "SerialExecutor", "ThreadExecutor", "TrialExecutor", "consolidate_inline", "run_once"]

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


class TrialExecutor(Protocol):
    """Runs independent work items (trials, drafts) and returns their results in input order."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]: ...


class SerialExecutor:
    """One item after the other (deterministic order; debugging)."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        return [fn(x) for x in items]


class ThreadExecutor:
    """A thread pool of ``parallel`` workers (model calls are I/O bound)."""

    def __init__(self, parallel: int) -> None:
        self.parallel = max(1, parallel)

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if len(items) <= 1 or self.parallel == 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.parallel, len(items))) as pool:
            return list(pool.map(fn, items))


def _trial(deps: Deps, run_id: str, slot: TrialSlot) -> dict[str, Any]:
    """One trial, as the ``replay_trial`` chord member runs it: an exception leaves the slot empty
    (a missing trial), it never fails the run — the same on the cluster and inline."""
    try:
        return run_trial(deps, run_id, slot)
    except Exception as exc:
        log.warning("run %s: trial failed: %s", run_id, type(exc).__name__, exc_info=True)
        deps.metrics.replay_finished({"status": "error"})
        return {"status": "error", "error": error_record(exc), "world_id": slot.world_id, "trial": slot.trial}


def _draft(deps: Deps, run_id: str, variant: str) -> list[TrialSlot]:
    """One draft and, when it passed, its launch, as the ``draft_candidate`` chord member runs them:
    returns the candidate's trial slots; an exception drops the variant (no slots)."""
    try:
        draft = draft_step(deps, run_id, variant)
        if draft.get("gate") is not None or not draft.get("payload"):
            return []
        return launch_candidate(deps, run_id, variant)
    except Exception as exc:
        log.warning("run %s: draft %s failed: %s", run_id, variant, type(exc).__name__, exc_info=True)
        return []


def _drafts_then_trials(deps: Deps, run_id: str, variants: Sequence[str], executor: TrialExecutor) -> None:
    """Each candidate's trials start as soon as its own draft passed (not when every draft is done),
    on the same pool: the shape of the cluster's draft chord (docs/architecture.md)."""
    if not isinstance(executor, ThreadExecutor) or executor.parallel == 1:
        for v in variants:
            executor.map(lambda s: _trial(deps, run_id, s), _draft(deps, run_id, v))
        return
    with ThreadPoolExecutor(max_workers=executor.parallel) as pool:
        drafts = [pool.submit(_draft, deps, run_id, v) for v in variants]
        trials: list[Future[dict[str, Any]]] = []
        for done in as_completed(drafts):
            trials += [pool.submit(_trial, deps, run_id, s) for s in done.result()]
        wait(trials)


def _advance(deps: Deps, nxt: Next, executor: TrialExecutor) -> Next:
    run_id = nxt.ctx.run_id
    if nxt.kind == "trials":
        executor.map(lambda s: _trial(deps, run_id, s), nxt.slots)
        return after_incumbent(deps, run_id) if nxt.ctx.phase == "incumbent" else judge_round(deps, run_id)
    if nxt.kind == "drafts":
        _drafts_then_trials(deps, run_id, nxt.variants, executor)
        return judge_round(deps, run_id)
    if nxt.kind == "judge":
        return judge_round(deps, run_id)
    raise ValueError(f"cannot advance from {nxt.kind!r}")


class NotOpened(Exception):
    """A run could not even open its row; the lease was released (or handed to ``rerun``)."""

    def __init__(self, cause: Exception, rerun: Lease | None) -> None:
        super().__init__(f"the run was not opened: {type(cause).__name__}")
        self.cause, self.rerun = cause, rerun


def run_once(
    deps: Deps, lease: Lease, executor: TrialExecutor | None = None, *, force: bool = False,
    kind: str = KIND_CONSOLIDATE,
) -> tuple[ConsolidationResult | None, Lease | None]:
    """One run for ``lease``: returns its result (``None`` if the run was already finished) and the
    lease of the re-run a turn that arrived meanwhile asks for. ``force``/``kind``: see :func:`open_run`.

    An exception in any step closes the run like the Celery tasks do (``settle``: ``failed`` with
    the reason, or ``interrupted`` when the lease was lost) and the lease is released or handed on
    (``docs/operations/failure-recovery.md``).

    Raises:
        NotOpened: the run failed before its row existed (nothing was written; the lease was
            released or handed to ``NotOpened.rerun``).
    """
    executor = executor or ThreadExecutor(deps.params.parallel)
    t0 = time.monotonic()
    try:
        nxt = open_run(deps, lease, force=force, kind=kind)
        while nxt.kind not in ("final", "stop"):
            nxt = _advance(deps, nxt, executor)
        if nxt.kind == "stop":
            return None, None
        assert nxt.result is not None
        nxt.result.seconds = time.monotonic() - t0
        return finalize(deps, nxt.ctx, nxt.result)
    except Exception as exc:
        return _settle(deps, lease, exc)


def _settle(deps: Deps, lease: Lease, exc: Exception) -> tuple[ConsolidationResult | None, Lease | None]:
    """Close the run of ``lease`` after ``exc`` (see :func:`run_once`)."""
    if isinstance(exc, CoordinationError):
        log.warning("run of %s (fence %s) stopped: %s", lease.agent, lease.fence, type(exc).__name__)
    else:
        log.warning("run of %s (fence %s) failed: %s", lease.agent, lease.fence, type(exc).__name__,
                    exc_info=True)
    settled = settle_lease(deps, lease, exc)
    if not settled.opened:
        raise NotOpened(exc, settled.rerun) from exc
    return settled.result, settled.rerun


def consolidate_inline(
    deps: Deps, lease: Lease, executor: TrialExecutor | None = None, *, max_reruns: int = 10,
    force: bool = False, kind: str = KIND_CONSOLIDATE,
) -> list[ConsolidationResult]:
    """Run for ``lease``, then the re-runs pending turns ask for (at most ``max_reruns``).

    ``force`` and ``kind`` apply to the first run only; re-runs are ordinary ``consolidate`` runs.

    Raises:
        Exception: the first run's own error when it could not open its row (see :class:`NotOpened`),
            after the re-runs it handed on have run.
    """
    results: list[ConsolidationResult] = []
    current: Lease | None = lease
    error: Exception | None = None
    for i in range(max_reruns + 1):
        if current is None:
            break
        first = i == 0
        try:
            result, current = run_once(deps, current, executor, force=force and first,
                                       kind=kind if first else KIND_CONSOLIDATE)
        except NotOpened as exc:
            error, current, result = error or exc.cause, exc.rerun, None
        if result is not None:
            results.append(result)
    if current is not None:  # the chain is longer than max_reruns: never keep the lease without a run
        log.warning("agent %s: re-run chain cut at %d; turn %s left to the next trigger", current.agent,
                    max_reruns, current.io)
        deps.coord.delete_lease_if(current.agent, current.token)
    if error is not None:
        raise error
    return results
