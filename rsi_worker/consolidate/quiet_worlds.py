"""The pool's worlds of a no-signal run, built once per process and reused while their rows do not
change (docs/performance/consolidation.md#the-no-signal-path).

Building the window's 60 :class:`~rsi_worker.consolidate.worlds.PoolWorld` objects (each row's signals
decoded, its columns converted) was one of the run's larger steps, and from one run to the next 59
of the 60 rows are the same. A world is a function of its row (a ``pool_memo.Head``: the columns and
the signals' text), so the world built from a row is remembered with the row, by its id, and the
next run whose row of that id is equal takes it from the memo. A remembered world reads no record: it
belongs to :data:`NO_RECORDS`, whose :meth:`~RememberedPool.record` raises :class:`NeedsRecord`. The
decision is taken on them with the very functions of the full survey; one that needs a record (an
unread conversation pair to check, an accepted answer not yet remembered) raises, and the caller
takes the decision again on the run's own :class:`~rsi_worker.consolidate.worlds.WorldPool` — the
same answer, with the reads. A row whose signals fail their check is never remembered (the run's
own pool names it).

The remembered worlds are shared by the process's runs and never changed: the no-signal decision
only reads them (a run that goes on to a round builds its own pool).

Project decision: at most :data:`WORLDS_MEMO_MAX` rows (the memo is emptied when full).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rsi_common.stored import StoredDataError
from rsi_worker.consolidate.pool_memo import Head
from rsi_worker.consolidate.worlds import PoolWorld, WorldPool, decode_signals

__all__ = ["NO_RECORDS", "WORLDS_MEMO_MAX", "NeedsRecord", "RememberedPool", "clear", "remembered"]

WORLDS_MEMO_MAX = 8192
"""Rows whose world is kept per process (:func:`remembered`); the memo is emptied when it holds more."""


class NeedsRecord(Exception):
    """A remembered world's record was asked for: decide again on the run's own pool."""


class RememberedPool(WorldPool):
    """A pool of remembered worlds (no connection): its worlds are all usable, none is skipped, and
    asking for a record raises :class:`NeedsRecord`."""

    def __init__(self, worlds: Sequence[PoolWorld] = ()) -> None:  # no session: never reads
        self._records: dict[str, dict[str, Any]] = {}
        self.skipped: dict[str, str] = {}
        self.worlds = list(worlds)

    def usable(self) -> list[PoolWorld]:
        return list(self.worlds)

    def record(self, world_id: str) -> dict[str, Any]:
        raise NeedsRecord(world_id)

    def prefetch(self, world_ids: Sequence[str]) -> None:
        if world_ids:
            raise NeedsRecord(world_ids[0])


NO_RECORDS = RememberedPool()
"""The pool every remembered world belongs to (it holds none of them)."""

_WORLDS: dict[str, tuple[Head, PoolWorld]] = {}
"""World id → the row its world was built from, and the world (used only for an equal row)."""


def clear() -> None:
    """Forget every remembered world (tests)."""
    _WORLDS.clear()


def remembered(heads: Sequence[Head]) -> RememberedPool | None:
    """The worlds of ``heads`` (in their order) from the memo, built for the rows not in it; ``None``
    when a row's signals fail their check (the run's own pool skips it and names it)."""
    worlds = []
    for h in heads:
        found = _WORLDS.get(h.id)
        if found is not None and (found[0] is h or found[0] == h):  # the pool memo keeps the row object
            worlds.append(found[1])
            continue
        try:
            signals, digest = decode_signals(h.signals)
        except StoredDataError:
            return None
        w = PoolWorld(NO_RECORDS, h, signals, digest)
        if len(_WORLDS) >= WORLDS_MEMO_MAX:
            _WORLDS.clear()
        _WORLDS[h.id] = (h, w)
        worlds.append(w)
    return RememberedPool(worlds)
