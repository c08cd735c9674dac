"""What an evolve run's tasks would reload on every hop, kept per process
(docs/algorithm/evolve.md#on-the-cluster).

On the cluster every ``evolve_step`` and ``evolve_trial`` starts from the database. What never changes
under a run is kept here instead of being read and validated again by each task:

* the run's **static part** — its suite (validated), configuration, checks, splits and the worlds of
  its world-backed tasks — keyed by ``(database, run, suite key)``; the suite key is the SHA-256 of
  the stored suite's JSON (:func:`suite_key`), so a suite replaced under the same name is loaded
  again (a run's name and configuration never change once created);
* a **draft's harness**, keyed by ``(database, run, round, variant)``: a stored draft's
  payload is never rewritten (a round drafts a variant only when it has no stored draft).

Both are bounded (least recently used first out) and thread-safe. A miss loads from SQL exactly as
before, so the memo changes no decision, only how often the same rows are read.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from rsi_common.harness import Harness, materialize
from rsi_common.world import TurnWorld
from rsi_worker.consolidate.context import load_worlds
from rsi_worker.evolve.config import EvolveConfig
from rsi_worker.evolve.store import Store
from rsi_worker.evolve.suite import Suite

__all__ = ["MEMO", "Memo", "RunStatic", "suite_key"]

V = TypeVar("V")
MAX_ENTRIES = 64
"""Entries per table; a worker serves few runs at once."""


def suite_key(spec: Mapping[str, Any]) -> str:
    """SHA-256 (hex, 16 characters) of a stored suite's canonical JSON (``surrogatepass``: a poisoned row
    with a lone surrogate still gets a key, and its validation then names the field)."""
    text = json.dumps(spec, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class RunStatic:
    """The part of a run that never changes under it: suite, configuration, checks, splits, worlds."""

    suite_name: str
    suite_key: str
    config: EvolveConfig
    suite: Suite
    checks: Mapping[str, Any]
    evolve_ids: tuple[str, ...]
    heldout_ids: tuple[str, ...]
    worlds: Mapping[str, TurnWorld]


def _database(sessions: sessionmaker[Session]) -> str:
    bind = sessions.kw.get("bind")
    return f"{getattr(bind, 'url', None)}@{id(bind) if bind is not None else id(sessions)}"


class _Lru:
    def __init__(self, size: int) -> None:
        self.size, self.items, self.lock = size, OrderedDict[tuple[Any, ...], Any](), threading.Lock()

    def get(self, key: tuple[Any, ...], load: Callable[[], V]) -> V:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]  # type: ignore[no-any-return]
        value = load()  # outside the lock: two loads of one key store equal values
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return value

    def clear(self) -> None:
        with self.lock:
            self.items.clear()


class Memo:
    """The per-process tables (module docstring). ``loads`` counts the misses (tests, benches)."""

    def __init__(self, size: int = MAX_ENTRIES) -> None:
        self._static, self._harness = _Lru(size), _Lru(size)
        self.loads = {"static": 0, "harness": 0}

    def static(self, sessions: sessionmaker[Session], name: str, key: str | None = None) -> RunStatic:
        """Run ``name``'s static part. ``key``: the suite key the caller knows (a trial gets its step's);
        without it the stored suite is read (one statement) to learn it.

        Raises:
            InvalidInput: unknown run or suite.
        """
        store, db = Store(sessions), _database(sessions)
        if key is None:
            suite_name = store.run_suite(name)
            key = suite_key(store.suite_spec(suite_name))

        def load() -> RunStatic:
            self.loads["static"] += 1
            suite_name, config, _, _, _ = store.run(name)
            spec = store.suite_spec(suite_name)
            suite = store.suite(suite_name)
            world_ids = [t.world_id for t in suite.tasks if t.world_id is not None]
            with sessions() as s:
                worlds = load_worlds(s, world_ids, suite.agent)
            return RunStatic(
                suite_name,
                suite_key(spec),
                config,
                suite,
                suite.checks(),
                tuple(suite.evolve_ids),
                tuple(suite.heldout_ids),
                worlds,
            )

        return self._static.get((db, name, key), load)

    def harness(self, sessions: sessionmaker[Session], name: str, t: int, variant: str) -> Harness:
        """The harness of round ``t``'s stored draft ``variant``.

        Raises:
            KeyError: no such stored draft.
        """

        def load() -> Harness:
            self.loads["harness"] += 1
            rnd = Store(sessions).round(name, t) or {}
            return materialize(((rnd.get("drafts") or {})[variant])["payload"])

        return self._harness.get((_database(sessions), name, t, variant), load)

    def clear(self) -> None:
        self._static.clear()
        self._harness.clear()


MEMO = Memo()
"""This process's memo."""
