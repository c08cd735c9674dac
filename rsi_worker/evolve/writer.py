"""The round's writes off its critical path (docs/algorithm/evolve.md#the-rounds-writes).

A round stores what it makes as it goes (the state before it, the analysis, each draft, each smoke) so
that a killed run resumes from them. None of those writes is read by the round's next model call: the
proposer reads the analysis from memory, the judgement reads the drafts from memory. :class:`RoundWriter`
applies them on one thread of its own, **in the order they were put** (a later snapshot of the drafts
is written after an earlier one), while the round's calls go on. The round waits for a write only where
something outside this process reads it: a draft before its trials (the cluster's lanes load the draft's
harness from SQL; a trial row is never stored before the draft it measures) and every write before the
judgement's transaction (:meth:`RoundWriter.flush`).

A write that raises makes the round fail where it waits (:meth:`Future.result` / :meth:`flush`), as the
same write did when it ran on the round's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType

__all__ = ["RoundWriter"]


class RoundWriter:
    """One thread applying the round's writes in the order they were put. Use as a context manager:
    leaving it waits for every write (their errors are raised by :meth:`flush`, not by leaving)."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rsi-round-writer")
        self._futures: list[Future[None]] = []

    def put(self, write: Callable[[], None]) -> Future[None]:
        """Queue ``write``; the returned future ends when it (and every write put before it) is done."""
        fut = self._pool.submit(write)
        self._futures.append(fut)
        return fut

    def flush(self) -> None:
        """Wait for every write put so far; raise the first one's error."""
        for fut in list(self._futures):
            fut.result()

    def __enter__(self) -> RoundWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._pool.shutdown(wait=True)
