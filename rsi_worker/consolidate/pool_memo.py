"""The world pool of a no-signal run, read once per process and then only as its changed rows
(docs/performance/consolidation.md#the-no-signal-path).

Database triggers (migration ``0010_epoch``) stamp every world row when it is inserted or a column the
pool read returns changes — with the agent's ``pool_epoch``, bumped in the same statement under the
agent row's lock — and raise the agent's ``pool_floor`` to the old ``clock`` of a deleted world (or of
one whose ``clock`` or ``agent_id`` changed). Every writer, present and future, on both backends.

A process remembers, per database and agent, the last pool window it read (:class:`PoolMemo`: the
``n`` latest untainted rows, newest first, and the ``pool_epoch`` they are as of). The next run, in a
read transaction that sees one snapshot (SQLite's deferred transaction; ``REPEATABLE READ`` on
PostgreSQL), reads the agent's ``pool_epoch`` and ``pool_floor`` with its other columns and then:

* the same epoch: no pool statement at all;
* a newer one: only the rows stamped after the memo's epoch (``quiet_sql`` ``changed``, index
  ``(agent_id, stamp)``); each replaces its old version, a tainted one leaves; the window is the
  ``n`` first of them all by ``(clock, seq, id)`` descending.

The window so built equals the full read's when (checked, else the full read runs): every row the
memo did not hold ranks below the memo's last row unless it changed (then it was read), so the
window's ``n``-th row must rank at or above the memo's last (or the memo held every untainted row);
and no deleted row can be in the window: every row of the window has a ``clock`` above
``pool_floor``. Retention deletes the oldest rows, below the window: the steady run keeps its memo.
A memo from another incarnation of the agent (its ``created_at`` differs), another window size, an
epoch ahead of the database's, or an agent whose worlds were never stamped (``pool_epoch`` 0: the
triggers are absent) is not used.

Project decision: at most :data:`POOL_MEMO_MAX` agents per process (the memo is emptied when full),
about 60 rows of a few hundred bytes each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["POOL_MEMO_MAX", "Head", "PoolMemo", "clear", "merge", "pool_window"]

POOL_MEMO_MAX = 256
"""Agents whose last pool window is kept per process; the memo is emptied when it holds more."""


class Head(NamedTuple):
    """A pool row without its record: the columns of ``quiet_sql`` ``pool`` (``signals`` as text)."""

    id: str
    io_id: str
    interaction_id: str | None
    seq: int | None
    clock: float | None
    replayable: Any
    signals: str | None
    harness_version: str | None
    model: str | None
    provider: str | None

    @classmethod
    def of(cls, row: Any) -> Head:
        """The head of a row with these attributes (a changed row's ``tainted`` is dropped)."""
        return cls(row.id, row.io_id, row.interaction_id, row.seq, row.clock, row.replayable, row.signals,
                   row.harness_version, row.model, row.provider)

    @classmethod
    def at(cls, row: Sequence[Any]) -> Head:
        """The head of a ``quiet_sql`` ``pool`` or ``changed`` row as a plain tuple (``id``, ``io_id``,
        ``interaction_id``, ``seq``, ``clock``, ``replayable``, ``harness_version``, ``model``,
        ``provider``, ``signals`` [, ``tainted``])."""
        return cls(row[0], row[1], row[2], row[3], row[4], row[5], row[9], row[6], row[7], row[8])


def _key(h: Head) -> tuple[float, int, str]:
    """The pool's order (``clock DESC, seq DESC, id DESC``), ascending."""
    return float(h.clock or 0.0), int(h.seq or 0), h.id


@dataclass(frozen=True)
class PoolMemo:
    """A pool window as of an epoch."""

    created: Any
    """The agent's ``created_at`` as read: another incarnation of the agent does not match."""
    epoch: int
    n: int
    rows: tuple[Head, ...]
    """The ``n`` latest untainted rows, newest first."""
    complete: bool
    """The rows are every untainted row of the agent (fewer than ``n`` then)."""
    ordered: bool = False
    """The rows are in the pool's order by :func:`_key` (a window :func:`merge` sorted; a full read's
    rows are as the database sorted them)."""


_MEMO: dict[tuple[Any, str], PoolMemo] = {}


def clear() -> None:
    """Forget every window (tests)."""
    _MEMO.clear()


def merge(memo: PoolMemo, changed: Iterable[Any],
          floor: float | None) -> tuple[tuple[Head, ...], bool] | None:
    """The window after ``changed`` (rows stamped after ``memo.epoch``, plain tuples with ``tainted``
    last) and the deletes below ``floor`` (``pool_floor`` as read), with whether it is complete;
    ``None`` when it cannot be known without the full read (module docstring)."""
    n = memo.n
    changed = list(changed)
    merged = _on_top(memo, changed)
    if merged is None:
        rows = {h.id: h for h in memo.rows}
        for r in changed:  # plain tuples (:meth:`Head.at`), ``tainted`` last
            rows.pop(r[0], None)
            if not r[10]:
                rows[r[0]] = Head.at(r)
        merged = sorted(rows.values(), key=_key, reverse=True)
    if not memo.complete and (not memo.rows or len(merged) < n or _key(merged[n - 1]) < _key(memo.rows[-1])):
        return None  # an unchanged row the memo does not hold may belong to the window
    window = tuple(merged[:n])
    if window and floor is not None and float(floor) >= float(window[-1].clock or 0.0):
        return None  # a deleted (or moved) row may be in it
    return window, memo.complete and len(merged) <= n


def _on_top(memo: PoolMemo, changed: Sequence[Any]) -> list[Head] | None:
    """The sorted union of the memo's rows and ``changed`` when the memo's rows are in the pool's order
    (``ordered``) and every changed row is untainted and either new and ranked above the memo's first
    — the steady run: the new turn — or a row of the memo whose rank did not move (its signals
    changed: a verdict written on an earlier turn), which takes its old row's place; without sorting
    the window again (ids are unique: the full sort gives this very list); ``None`` otherwise (the
    caller sorts)."""
    rows = memo.rows
    if not memo.ordered or not rows:
        return None
    top = _key(rows[0])
    heads = []
    out: list[Head] | None = None
    at = {x.id: i for i, x in enumerate(rows)} if changed else {}
    for r in changed:
        if r[10]:
            return None
        h = Head.at(r)
        k = _key(h)
        i = at.get(h.id)
        if i is None:  # a new row: on top, or the caller sorts
            if not k > top:
                return None
            heads.append(h)
            continue
        if _key(rows[i]) != k:  # a row that moved: the caller sorts
            return None
        if out is None:
            out = list(rows)
        out[i] = h
    return sorted(heads, key=_key, reverse=True) + (list(rows) if out is None else out)


def pool_window(db: Any, agent_id: str, n: int, agent: Any, *, full: Callable[[], Sequence[Any]],
                changed: Callable[[int], Sequence[Any]]) -> list[Head]:
    """The ``n`` latest untainted worlds of ``agent_id`` (newest first), from the memo of ``db`` (the
    engine's URL) where it holds (module docstring), else ``full()`` — the pool read.

    ``agent``: the agent row as read in the same snapshot (``pool_epoch``, ``pool_floor``,
    ``created_at``); ``full()``: the pool read's rows, ``changed(since)``: the rows stamped after
    ``since`` with ``tainted``, both as plain tuples in ``quiet_sql``'s column order (:meth:`Head.at`).
    """
    epoch = int(agent.pool_epoch or 0)
    key = (db, agent_id)
    memo = _MEMO.get(key)
    if n > 0 and epoch > 0 and memo is not None and memo.created == agent.created_at and memo.n == n \
            and memo.epoch <= epoch:
        merged = merge(memo, changed(memo.epoch) if memo.epoch < epoch else (), agent.pool_floor)
        if merged is not None:
            window, complete = merged
            if epoch != memo.epoch or window != memo.rows:
                _MEMO[key] = PoolMemo(memo.created, epoch, n, window, complete, ordered=True)
            return list(window)
    rows = [Head.at(r) for r in full()]
    if n > 0 and epoch > 0:
        if key not in _MEMO and len(_MEMO) >= POOL_MEMO_MAX:
            _MEMO.clear()
        _MEMO[key] = PoolMemo(agent.created_at, epoch, n, tuple(rows), len(rows) < n)
    else:
        _MEMO.pop(key, None)
    return rows
