"""Wave scheduling of a candidate's trials for early stop
(docs/performance/consolidation.md#trial-order).

On a cluster with free threads every trial of a candidate starts at once, so a hopeless candidate's
trials have all made their model calls before the first failure is counted: the cancel flag then
saves nothing. Here a candidate's slots (in :func:`~rsi_worker.consolidate.evaluate.plan_candidate`
order) form two waves:

* **the first wave**: the shortest prefix of the slots whose failure alone lets the exact bound stop
  the candidate (:func:`first_wave`, the floor of early stop's work — the benchmark's ceiling);
* **the rest** waits before its replay (:func:`await_first_wave`) until the candidate is cancelled
  (then it stores ``cancelled`` without a model call), or a first-wave trial passed a criterion (the
  candidate is not hopeless: go), or every first-wave slot was counted, or ``early_stop_wave_s``
  passed (default :data:`WAVE_WAIT_S`; 0 turns waves off; a bound on the wait, so a cluster whose
  threads all wait cannot stall). The wait renews the run's lease like a replay does.

What is decided never changes: the exact bound is order-free and a waiting trial runs or is cancelled
exactly as it would be at its turn (``tests/unit/math/test_early_stop_invariant.py``). The price is
latency for a candidate that is neither hopeless nor passing in its first wave: its second wave starts
one trial later.

**A waiting trial holds no thread in one process** (:class:`WaveGate`): the inline driver hands a
candidate's second wave to its pool only when a first-wave result releases it (a criterion passed, the
candidate cancelled, or every first-wave trial returned), so another candidate's trials take the
threads meanwhile. The released trials still call :func:`await_first_wave`, which then returns at once.

**Nor on the cluster** (``rsi_worker/cluster/wave_release.py``): a candidate's draft sends only its first
wave and a gate; the first-wave trial whose result releases the wave (:func:`release_due`), or the gate,
sends the rest under one claim. Trials so sent run inside :func:`released` and never wait.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from rsi_common.coord import Bounds
from rsi_common.math.bounds import can_stop_exactly
from rsi_worker.consolidate.evaluate import INCUMBENT, TrialSlot

if TYPE_CHECKING:
    from rsi_worker.consolidate.context import Deps, RoundContext

__all__ = ["WAVE_POLL_S", "WAVE_WAIT_S", "WaveGate", "await_first_wave", "first_wave", "is_released",
           "release_due", "released", "releases", "wave_size"]

log = logging.getLogger(__name__)

WAVE_WAIT_S = 30.0
"""Longest wait of a second-wave trial for its first wave."""
WAVE_POLL_S = 0.05
"""Interval of the waiting trial's look at the candidate's bound."""


def first_wave(slots: Sequence[TrialSlot], checks: Mapping[str, Sequence[Any]], bounds: Bounds,
               margin: float) -> int:
    """How many leading ``slots`` decide the stop if they all fail: the smallest n whose failed
    weight lets :func:`~rsi_common.math.bounds.can_stop_exactly` hold from the bound's start
    (A = B = 0, R = R₀ = the stored ``R + B``); ``len(slots)`` when no prefix can."""
    total, failed = bounds.R + bounds.B, 0
    for n, slot in enumerate(slots, start=1):
        failed += len(checks.get(slot.world_id) or ())
        if can_stop_exactly(0, failed, total - failed, bounds.S_star, bounds.delta, bounds.S_t,
                            margin=margin):
            return n
    return len(slots)


def wave_size(deps: Deps, ctx: RoundContext, slots: Sequence[Any]) -> int:
    """How many of a candidate's follow-on ``slots`` (plan order) are sent at once: its first wave
    (:func:`first_wave`, from the bound in Redis), or all of them when waves are off, early stop is off,
    or no bound can be read (the trials then decide alone)."""
    if (not slots or not ctx.early_stop or deps.params.early_stop_wave_s <= 0
            or not isinstance(slots[0], TrialSlot) or slots[0].candidate == INCUMBENT):
        return len(slots)
    try:
        bounds, _ = deps.coord.bound_progress(ctx.run_id, slots[0].candidate)
    except Exception as exc:  # a member never raises; neither does its launch
        log.warning("run %s: no wave for %s: %s", ctx.run_id, slots[0].candidate, type(exc).__name__)
        return len(slots)
    return len(slots) if bounds is None else first_wave(slots, ctx.checks, bounds, deps.coord.margin)


_RELEASED: ContextVar[bool] = ContextVar("rsi_wave_released", default=False)


@contextlib.contextmanager
def released(on: bool = True) -> Iterator[None]:
    """Run a trial whose wave was released already (sent by a release, never before it): inside,
    :func:`is_released` is true and the trial does not wait in :func:`await_first_wave` (its cancel
    flag is still read when it starts)."""
    token = _RELEASED.set(on)
    try:
        yield
    finally:
        _RELEASED.reset(token)


def is_released() -> bool:
    """Whether the current trial runs inside :func:`released`."""
    return _RELEASED.get()


def release_due(result: Mapping[str, Any] | None, bounds: Bounds | None, counted: int, wave: int,
                cancelled: bool) -> bool:
    """Whether a candidate's second wave is to be sent now, from one first-wave ``result`` (``None``:
    none at hand, e.g. the gate) and the candidate's state in Redis: the result :func:`releases` it,
    the candidate is cancelled, a counted trial passed a criterion (``A`` > 0), every one of the
    ``wave`` first-wave slots is counted, or no bound is stored (never created, or cleaned up at the
    run's close: nothing to wait for)."""
    if result is not None and releases(result):
        return True
    return cancelled or bounds is None or bounds.A > 0 or counted >= wave


def await_first_wave(slot: TrialSlot, plan: Sequence[Mapping[str, Any]], checks: Mapping[str, Sequence[Any]],
                     read: Callable[[], tuple[Bounds | None, int]], stop: Callable[[], bool], *,
                     wait_s: float = WAVE_WAIT_S, poll_s: float = WAVE_POLL_S,
                     margin: float = 1e-9) -> bool:
    """Wait while ``slot`` is in its candidate's second wave and the first wave is undecided
    (module docstring); True when the trial must not run (``stop()`` said so: cancelled or lease lost).

    Args:
        plan: the candidate's stored slots (JSON), in plan order.
        read: the candidate's bound and the number of slots counted in it (Redis).
        stop: the replay's cancel callback (cancel flag; renews the lease).
    """
    if is_released():
        return False
    slots = [TrialSlot.from_json(s) for s in plan]
    mine = (slot.world_id, slot.trial)
    index = next((i for i, s in enumerate(slots) if (s.world_id, s.trial) == mine), None)
    bounds, counted = read()
    if index is None or bounds is None:
        return False
    wave = first_wave(slots, checks, bounds, margin)
    if index < wave:
        return False
    deadline = time.monotonic() + wait_s
    while True:
        if stop():
            return True
        if bounds is None or bounds.A > 0 or counted >= wave or time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
        bounds, counted = read()


def releases(result: Mapping[str, Any]) -> bool:
    """Whether one first-wave trial's result releases its candidate's second wave on its own: it
    passed a criterion (``ok`` with ``passed`` > 0: not hopeless) or found the candidate cancelled."""
    if result.get("status") == "cancelled":
        return True
    passed = (result.get("result") or {}).get("passed") if result.get("status") == "ok" else 0
    return isinstance(passed, int) and passed > 0


class WaveGate:
    """Releases a candidate's second wave once (module docstring): call :meth:`done` with each of the
    ``first`` first-wave results; ``release`` runs at the first result that :func:`releases`, or at the
    last result. Thread-safe; ``release`` runs outside the lock, in the thread of that result."""

    def __init__(self, first: int, release: Callable[[], None]) -> None:
        self.left, self.release, self.released = first, release, False
        self.fired = threading.Event()
        """Set once ``release`` has returned (or raised)."""
        self._lock = threading.Lock()
        if first <= 0:
            self.released = True
            self._fire()

    def _fire(self) -> None:
        try:
            self.release()
        finally:
            self.fired.set()

    def done(self, result: Mapping[str, Any] | None) -> None:
        """One first-wave trial returned ``result`` (``None``: it raised — counted, releases nothing)."""
        with self._lock:
            self.left -= 1
            go = not self.released and (self.left <= 0 or (result is not None and releases(result)))
            if go:
                self.released = True
        if go:
            self._fire()
