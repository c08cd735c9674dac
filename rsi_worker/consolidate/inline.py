"""Running a whole consolidation in one process (``rsi consolidate --inline``, tests, embedded).

The steps are the same functions the Celery tasks call; only the fan-out differs: here trials
and drafts go through a :class:`TrialExecutor` (a thread pool by default) instead of chords.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from rsi_common.coord import Lease
from rsi_common.errors import CoordinationError
from rsi_worker.consolidate.context import Deps, RoundContext
from rsi_worker.consolidate.drafting import draft_step, launch_candidates
from rsi_worker.consolidate.finalize import finalize, settle
from rsi_worker.consolidate.incumbent import after_incumbent
from rsi_worker.consolidate.judging import judge_round
from rsi_worker.consolidate.opening import KIND_CONSOLIDATE, Next, open_run
from rsi_worker.consolidate.result import ConsolidationResult
from rsi_worker.consolidate.trials import run_trial

__all__ = ["SerialExecutor", "ThreadExecutor", "TrialExecutor", "consolidate_inline", "run_once"]

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


def _advance(deps: Deps, nxt: Next, executor: TrialExecutor) -> Next:
    run_id = nxt.ctx.run_id
    if nxt.kind == "trials":
        executor.map(lambda s: run_trial(deps, run_id, s), nxt.slots)
        return after_incumbent(deps, run_id) if nxt.ctx.phase == "incumbent" else judge_round(deps, run_id)
    if nxt.kind == "drafts":
        executor.map(lambda v: draft_step(deps, run_id, v), nxt.variants)
        return launch_candidates(deps, run_id)
    if nxt.kind == "judge":
        return judge_round(deps, run_id)
    raise ValueError(f"cannot advance from {nxt.kind!r}")


def run_once(
    deps: Deps, lease: Lease, executor: TrialExecutor | None = None, *, force: bool = False,
    kind: str = KIND_CONSOLIDATE,
) -> tuple[ConsolidationResult | None, Lease | None]:
    """One run for ``lease``: returns its result (``None`` if the run was already finished) and the
    lease of the re-run a turn that arrived meanwhile asks for. ``force``/``kind``: see :func:`open_run`."""
    executor = executor or ThreadExecutor(deps.params.parallel)
    t0 = time.monotonic()
    ctx: RoundContext | None = None
    try:
        nxt = open_run(deps, lease, force=force, kind=kind)
        ctx = nxt.ctx
        while nxt.kind not in ("final", "stop"):
            nxt = _advance(deps, nxt, executor)
            ctx = nxt.ctx
        if nxt.kind == "stop":
            return None, None
        assert nxt.result is not None
        nxt.result.seconds = time.monotonic() - t0
        return finalize(deps, nxt.ctx, nxt.result)
    except Exception as exc:
        if ctx is None:
            raise
        if isinstance(exc, CoordinationError):
            log.warning("run %s of %s stopped: %s", ctx.run_id, lease.agent, exc)
        else:
            log.exception("run %s of %s failed", ctx.run_id, lease.agent)
        return settle(deps, ctx.run_id, exc)


def consolidate_inline(
    deps: Deps, lease: Lease, executor: TrialExecutor | None = None, *, max_reruns: int = 10,
    force: bool = False, kind: str = KIND_CONSOLIDATE,
) -> list[ConsolidationResult]:
    """Run for ``lease``, then the re-runs pending turns ask for (at most ``max_reruns``).

    ``force`` and ``kind`` apply to the first run only; re-runs are ordinary ``consolidate`` runs.
    """
    results: list[ConsolidationResult] = []
    current: Lease | None = lease
    for i in range(max_reruns + 1):
        if current is None:
            break
        first = i == 0
        result, current = run_once(deps, current, executor, force=force and first,
                                   kind=kind if first else KIND_CONSOLIDATE)
        if result is not None:
            results.append(result)
    return results
