"""What a trial reads, remembered per process (docs/performance/consolidation.md#a-trials-cost).

A run's 48 trials read the same few rows again and again: each world up to 2k + k times (the
incumbent's and every candidate's trials), the incumbent harness once per incumbent trial, and the
agent's verdict cache once per trial. Those reads are remembered here, per worker process:

* **worlds** by ``(agent, world id)``: a world's request, history and answer never change once stored
  (only its signals do, which a trial does not read — its checks come from the run context);
* **incumbent harnesses** by ``(agent, version)``: a version is the digest of its content
  (``materialize`` checked it when it was first read);
* **the verdict cache** by ``(agent, run id)``: the agent's state is written by the run's own final
  write (the lease holder's), so it does not change while the run's trials run;
* **the run's decoded context and drafts** by ``(run id, the column's stored text)``: a trial reads
  the run row's ``params`` and ``drafts`` as text (one Core ``SELECT``) and decodes a text it has not
  seen (``RoundContext.from_json``); the text is the key, so a step or a draft that rewrote the
  column is a new entry, never a stale hit (docs/performance/consolidation.md#a-trials-cost).

A value is returned as read (never copied); callers treat it as read-only. Each memo holds at most
:data:`MEMO_MAX` entries and is emptied when full. Project decision: a world that retention removes
while a run still has trials to run is replayed from the memo by a process that read it before (the
run's worlds and their checks were fixed when it opened); a process that never read it stores the
trial ``missing``, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

__all__ = ["MEMO_MAX", "Memo", "clear", "contexts", "drafts", "harnesses", "verdicts", "worlds"]

MEMO_MAX = 1024
"""Entries per memo before it is emptied (a worker's few agents' worlds, versions and runs)."""

V = TypeVar("V")


class Memo:
    """A thread-safe ``key → value`` memo of at most ``limit`` entries, emptied when full. A loader
    that raises or returns ``None`` stores nothing."""

    def __init__(self, limit: int = MEMO_MAX) -> None:
        self.limit = limit
        self._data: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, load: Callable[[], V | None]) -> V | None:
        with self._lock:
            if key in self._data:
                return self._data[key]  # type: ignore[no-any-return]
        value = load()
        if value is not None:
            with self._lock:
                if len(self._data) >= self.limit:
                    self._data.clear()
                self._data[key] = value
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


worlds = Memo()
harnesses = Memo()
verdicts = Memo(64)
contexts = Memo(64)
"""``(run id, params text)`` → the decoded ``RoundContext`` (read-only: trials never change it)."""
drafts = Memo(64)
"""``(run id, drafts text)`` → the decoded drafts (read-only)."""


def clear() -> None:
    """Empty every memo (tests)."""
    for memo in (worlds, harnesses, verdicts, contexts, drafts):
        memo.clear()


def verdict_cache(state: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict cache of an agent's stored state (``{}`` when absent)."""
    return dict(state.get("verdicts") or {})
