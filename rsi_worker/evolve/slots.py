"""The trial slots of one round (docs/algorithm/evolve.md#evaluation): ``eval_parallel × trial_parallel``
threads shared by every evaluation of the round, filled as each trial ends (never in waves).

A job waiting for a slot is taken by priority first (lower first), then in submission order: smoke
trials (:data:`SMOKE`) gate their candidate's evaluation, so they go before evaluation trials
(:data:`TRIAL`) that are already queued. Which slot runs which trial never changes a decision (trial rows
are keyed by their slot; the early stop is decided from stored rows).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["SMOKE", "TRIAL", "SlotPool"]

SMOKE = 0
"""Priority of a smoke trial (it gates the rest of its candidate's evaluation)."""
TRIAL = 1
"""Priority of an evaluation trial (a candidate's, the baseline's, the held-out split's)."""
R = TypeVar("R")


class SlotPool:
    """Up to ``size`` worker threads (started as jobs arrive) taking jobs by ``(priority, submission
    order)``. Use as a context manager: leaving it waits for every submitted job."""

    def __init__(self, size: int, name: str = "rsi-trial") -> None:
        if size < 1:
            raise ValueError(f"size: must be >= 1, got {size}")
        self.size = size
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._closed = False
        self._name = name
        self._idle = 0
        self._threads: list[threading.Thread] = []
        """Started as jobs arrive (a job finding no idle thread starts one, up to ``size``): a round
        that runs no trial (its step judging stored rows) starts none."""

    def submit(self, fn: Callable[[], R], priority: int = TRIAL) -> Future[R]:
        """Run ``fn`` on the next free slot; its result or exception arrives in the returned future."""
        fut: Future[R] = Future()

        def job() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to the waiter, never lost in the worker
                fut.set_exception(exc)

        with self._cv:
            if self._closed:
                raise RuntimeError("slot pool closed")
            heapq.heappush(self._heap, (priority, next(self._seq), job))
            if self._idle < len(self._heap) and len(self._threads) < self.size:
                name = f"{self._name}-{len(self._threads)}"
                th = threading.Thread(target=self._work, name=name, daemon=True)
                self._threads.append(th)
                th.start()
            else:
                self._cv.notify()
        return fut

    def map(self, fn: Callable[[Any], R], items: list[Any], priority: int = TRIAL) -> list[R]:
        """``fn`` over ``items`` on the pool; results in input order (the first exception is raised)."""
        futures = [self.submit(functools.partial(fn, x), priority) for x in items]
        return [f.result() for f in futures]

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._heap and not self._closed:
                    self._idle += 1
                    self._cv.wait()
                    self._idle -= 1
                if not self._heap:
                    return
                _, _, job = heapq.heappop(self._heap)
            job()

    def close(self) -> None:
        """Let the queued jobs finish, then stop the threads."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            threads = list(self._threads)
        for th in threads:
            th.join()

    def __enter__(self) -> SlotPool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
