"""The worlds of a run: lazy, poison-tolerant loading (:class:`WorldPool`) and evaluation-world selection
(docs/algorithm/consolidation.md §3.5)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from rsi_common.db import load_latest_heads, world_texts
from rsi_common.stored import StoredDataError, decode_stored
from rsi_common.world import TurnWorld
from rsi_worker.consolidate.signals import WorldLike, negative
from rsi_worker.consolidate.state import EMPTY_DIGEST, signal_digest

__all__ = ["SIGNALS_MEMO_MAX", "PoolWorld", "WorldPool", "checked_record", "decode_signals", "needs_answer",
           "select_worlds"]

SIGNALS_MEMO_MAX = 4096
"""Stored signal texts whose check passed, kept per process with their digest (:func:`decode_signals`);
the memo is emptied when it holds more."""

_SIGNALS_MEMO: dict[str, str] = {}


def decode_signals(text: str | None) -> tuple[dict[str, Any], str]:
    """A row's stored ``signals`` text decoded and checked, with its :func:`signal_digest`.

    The same answer as ``decode_stored(text, "signals") or {}`` and ``signal_digest`` of it — the
    check and the digest are functions of the text, so a text seen before (most of a pool is the
    same from one run to the next) is only ``json.loads``-ed: its check passed and its digest is
    remembered (docs/performance/consolidation.md#the-no-signal-path). A text that fails its check is
    never remembered.

    Raises:
        StoredDataError: as :func:`rsi_common.stored.decode_stored`.
    """
    if text is None or text == "{}":  # most rows: no signal
        return {}, EMPTY_DIGEST
    digest = _SIGNALS_MEMO.get(text)
    if digest is not None:
        return json.loads(text), digest
    signals = decode_stored(text, "signals") or {}
    digest = signal_digest(signals)
    if len(_SIGNALS_MEMO) >= SIGNALS_MEMO_MAX:
        _SIGNALS_MEMO.clear()
    _SIGNALS_MEMO[text] = digest
    return signals, digest

W = TypeVar("W", bound=WorldLike)


def select_worlds(scored: Sequence[W], fresh: Collection[str], n_eval: int = 8) -> list[W]:
    """The evaluation worlds W of a round, in ``per_task`` order.

    Three groups — (a) fresh, (b) not fresh and negative, (c) the rest — each sorted by
    ``(clock, seq)`` descending, concatenated and cut to ``max(1, n_eval)``.

    Args:
        scored: replayable worlds with at least one check.
        fresh: ids of the worlds whose signals changed since the last completed run.
        n_eval: maximum number of evaluation worlds.
    """

    def newest_first(ws: list[W]) -> list[W]:
        return sorted(ws, key=lambda w: (w.clock, w.seq), reverse=True)

    group_a = [w for w in scored if w.id in fresh]
    group_b = [w for w in scored if w.id not in fresh and negative(w.signals)]
    group_c = [w for w in scored if w.id not in fresh and not negative(w.signals)]
    ordered = newest_first(group_a) + newest_first(group_b) + newest_first(group_c)
    return ordered[: max(1, n_eval)]


class WorldPool:
    """The worlds a run loaded, with each record read from SQL only when a step needs it.

    Most runs are decided from the signals alone (no fresh negative signal): they read only the
    row columns. Records are fetched, once, for the worlds whose request or answer matters —
    an unread conversation pair, a signal whose check quotes the answer, the evaluation worlds.
    The pool must be used while its session is open.

    **Poison rows are skipped, not fatal** (``docs/operations/failure-recovery.md``, *Poison
    rows*): signals and records are decoded row by row (:func:`rsi_common.stored.decode_stored`);
    a row that cannot be decoded, or holds text or numbers the pipeline cannot carry, is left out
    of :meth:`usable` and named in :attr:`skipped` with a reason that quotes no content. The run
    goes on with the other worlds and reports the skipped ones (``result.skipped_worlds``).
    """

    def __init__(self, session: Session | Connection, heads: Sequence[Any]) -> None:
        """``heads``: rows of ``load_latest_heads(..., signals_text=True)`` (signals undecoded)."""
        self._session = session
        self._records: dict[str, dict[str, Any]] = {}
        self.skipped: dict[str, str] = {}
        """World id → why the row was left out."""
        self.worlds: list[PoolWorld] = []
        for h in heads:
            try:  # most rows carry no signal: their text needs no decoding (the same empty object)
                signals, digest = decode_signals(h.signals)
            except StoredDataError as exc:
                self.skipped[h.id] = str(exc)
                continue
            self.worlds.append(PoolWorld(self, h, signals, digest))

    @classmethod
    def latest(cls, session: Session, agent_id: str, n: int, *, conn: Connection | None = None) -> WorldPool:
        """The agent's ``n`` latest worlds (newest first), decoded row by row; read on ``conn`` (the
        session's connection, no ORM round: nothing pending to flush) when given."""
        return cls(session, load_latest_heads(conn if conn is not None else session, agent_id, n,
                                              signals_text=True))

    def usable(self) -> list[PoolWorld]:
        """The loaded worlds not (yet) found bad, newest first."""
        return [w for w in self.worlds if w.id not in self.skipped]

    def record(self, world_id: str) -> dict[str, Any]:
        if world_id not in self._records:
            self.prefetch([world_id])
        return self._records[world_id]

    def prefetch(self, world_ids: Sequence[str]) -> None:
        """Read and check the records of several worlds in one query; bad ones read as ``{}``."""
        missing = [w for w in world_ids if w not in self._records]
        if not missing:
            return
        texts = world_texts(self._session, missing)
        for wid in missing:
            self._records[wid] = {}
            if wid in texts:
                try:
                    self._records[wid] = checked_record(texts[wid])
                except StoredDataError as exc:
                    self.skipped[wid] = str(exc)


def checked_record(text: str | bytes | None) -> dict[str, Any]:
    """A stored world record decoded and checked (:class:`WorldPool`), as stored.

    The check is :func:`rsi_common.stored.decode_stored` (a JSON object the pipeline can carry),
    not the full world schema: a record that is well-formed JSON but structurally odd fails at most
    its own replays (missing trials), never the whole run.

    Raises:
        StoredDataError: the reason, naming the field (never its value).
    """
    record = decode_stored(text, "world")
    if record is None:
        raise StoredDataError("world: no record")
    return dict(record)


class PoolWorld:
    """One world of a :class:`WorldPool`: row columns at hand, the record on demand.

    Offers what :class:`~rsi_common.world.TurnWorld` offers (``data``, ``request``, ``answer``,
    ``history`` …); ``replayable``, ``clock``, ``harness_version`` and ``model`` come from the row.
    """

    def __init__(self, pool: WorldPool, head: Any, signals: dict[str, Any], digest: str) -> None:
        self._pool = pool
        self.stored_digest: str = digest
        """:func:`signal_digest` of the signals as loaded (``signals`` may change later in the run)."""
        self.id: str = head.id
        self.io_id: str = head.io_id
        self.interaction_id: str = head.interaction_id or ""
        self.seq: int = int(head.seq or 0)
        self.clock: float = float(head.clock or 0.0)
        self.replayable: bool = bool(head.replayable)
        self.signals: dict[str, Any] = dict(signals)
        self.harness_version: str | None = head.harness_version
        self.model: str | None = head.model
        self.provider: str | None = head.provider

    @property
    def data(self) -> dict[str, Any]:
        return self._pool.record(self.id)

    def turn(self) -> TurnWorld:
        """The full :class:`TurnWorld`."""
        return TurnWorld(self.id, self.data, self.signals, self.interaction_id, self.seq)

    @property
    def request(self) -> str:
        return self.turn().request

    @property
    def answer(self) -> str:
        return self.turn().answer

    @property
    def history(self) -> list[Any]:
        return self.turn().history


def needs_answer(signals: Mapping[str, Any]) -> bool:
    """Whether :func:`checks_for` would quote the recorded answer (an accepted answer)."""
    stars = signals.get("stars")
    imp = signals.get("implicit")
    accepted = isinstance(stars, int) and not isinstance(stars, bool) and stars >= 4
    return accepted or (isinstance(imp, Mapping) and imp.get("kind") == "accept")
