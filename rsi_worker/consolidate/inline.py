"""Running a whole consolidation in one process (``rsi consolidate --inline``, tests, embedded).

The run follows the same state machine as on the cluster (:mod:`rsi_worker.consolidate.flow`: its
transition table, step checks and failure path); only the fan-out differs: here trials and drafts
go through a :class:`TrialExecutor` (a thread pool by default) instead of chords.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed, wait
from typing import Any, Protocol, TypeVar

from rsi_common.coord import Lease
from rsi_worker.consolidate import flow
from rsi_worker.consolidate.context import Deps, RoundContext
from rsi_worker.consolidate.opening import KIND_CONSOLIDATE
from rsi_worker.consolidate.outcome import Next
from rsi_worker.consolidate.result import ConsolidationResult
from rsi_worker.consolidate.waves import WaveGate, released, wave_size

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


def _first_wave(deps: Deps, ctx: RoundContext, slots: Sequence[Any]) -> int:
    """How many of a candidate's follow-on ``slots`` go to the pool at once (``waves.wave_size``;
    docs/performance/consolidation.md#trial-order)."""
    return wave_size(deps, ctx, slots)


def _fan_out(deps: Deps, edge: flow.Edge, ctx: RoundContext, items: Sequence[Any],
             executor: TrialExecutor) -> None:
    """Run an edge's members and, as soon as each returns, its follow-on members (a passed draft's
    trials) on the same pool: the shape of the cluster's draft chord (docs/architecture.md). A
    candidate's second wave is handed to the pool when its first wave releases it (``WaveGate``), so
    it holds no thread while it waits; every follow-on trial runs inside ``waves.released`` (the
    driver decided its wave: it reads no bound in ``await_first_wave``;
    docs/performance/consolidation.md#trial-order)."""
    run_id = ctx.run_id
    members = edge.members
    assert members is not None
    follow = flow.FOLLOWS.get(members)

    def member(item: Any) -> dict[str, Any]:
        return flow.run_member(deps, members, run_id, item)

    def follower(item: Any) -> dict[str, Any]:
        assert follow is not None
        with released():  # the driver holds the second wave back itself: no trial looks at the bound
            return flow.run_member(deps, follow, run_id, item)

    if follow is None:
        executor.map(member, items)
        return
    if not isinstance(executor, ThreadExecutor) or executor.parallel == 1:
        for item in items:
            executor.map(follower, flow.follow_on(members, member(item)))
        return
    with ThreadPoolExecutor(max_workers=executor.parallel) as pool:
        firsts = [pool.submit(member, item) for item in items]
        followers: list[Future[dict[str, Any]]] = []
        later: list[Future[dict[str, Any]]] = []
        gates: list[WaveGate] = []
        lock = threading.Lock()

        def submit_all(rest: Sequence[Any]) -> Callable[[], None]:
            def release() -> None:
                with lock:
                    later.extend(pool.submit(follower, x) for x in rest)
            return release

        def returned(gate: WaveGate) -> Callable[[Future[dict[str, Any]]], None]:
            return lambda f: gate.done(None if f.exception() is not None else f.result())

        for done in as_completed(firsts):
            res = done.result()
            slots = flow.follow_on(members, res)
            n = res["wave"] if isinstance(res.get("wave"), int) else _first_wave(deps, ctx, slots)
            first = [pool.submit(follower, x) for x in slots[:n]]
            followers += first
            if n < len(slots):
                gates.append(WaveGate(len(first), submit_all(slots[n:])))
                for f in first:
                    f.add_done_callback(returned(gates[-1]))
        wait(followers)
        for gate in gates:  # every first wave returned: each gate released (its callback may still run)
            gate.fired.wait()
        with lock:
            second = list(later)
        wait(second)


def _advance(deps: Deps, nxt: Next, executor: TrialExecutor) -> Next:
    """Follow one edge of the run's state machine (``flow.TRANSITIONS``): its members, then its step."""
    found = flow.edge(nxt)
    assert found is not None
    run_id = nxt.ctx.run_id
    if found.members is not None:
        _fan_out(deps, found, nxt.ctx, flow.items(nxt, found.members), executor)
    return flow.run_step(deps, found.then, run_id)


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

    An exception in any step closes the run like the Celery tasks do (``flow.fail_run``: ``failed``
    with the reason, or ``interrupted`` when the lease was lost) and the lease is released or handed
    on (``docs/operations/failure-recovery.md``).

    Raises:
        NotOpened: the run failed before its row existed (nothing was written; the lease was
            released or handed to ``NotOpened.rerun``).
    """
    executor = executor or ThreadExecutor(deps.params.parallel)
    try:
        nxt = flow.open_run(deps, lease, force=force, kind=kind)
        while nxt.kind not in ("final", "stop"):
            nxt = _advance(deps, nxt, executor)
        if nxt.kind == "stop":
            return None, None
        return flow.close(deps, nxt)
    except Exception as exc:
        settled = flow.fail_run(deps, exc, lease=lease)
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
