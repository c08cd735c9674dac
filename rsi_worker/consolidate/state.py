"""The per-agent consolidation state (docs/algorithm/consolidation.md §3.2), stored as JSON in
``rsi_agents.state``.

Format ``rsi-consolidation-state/1`` (docs/formats.md#consolidation-state-format). A stored state is
hostile input: :meth:`ConsolidationState.from_json` refuses an unknown format id (:data:`MIGRATIONS`
maps older ids forward; it is empty, this is the first format), an unknown key and a value of the
wrong type, naming the field (``state.progress[2]: must be a number``). A missing ``schema`` reads as
version 1 and a missing field takes its default — the empty state ``{}`` of a new agent is one —
and an empty ``progress`` becomes ``[0.0]``. Bounds (records window, scoreboard, cache versions,
verdicts, seen) are applied by the functions here, never by callers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi_common.credentials import safe_repr
from rsi_common.stored import StoredDataError
from rsi_worker.consolidate import fields as f

__all__ = [
    "EMPTY_DIGEST",
    "MIGRATIONS",
    "STATE_KEYS",
    "STATE_SCHEMA",
    "ConsolidationState",
    "migrate_state",
    "prune_cache",
    "remember",
    "signal_digest",
    "trim_records",
]

STATE_SCHEMA = "rsi-consolidation-state/1"
IMPLICIT_KINDS_WITH_DIGEST = ("correction", "complaint", "accept")
ANALYSIS_KEEP = 12
SCOREBOARD_KEEP = 40
STATE_KEYS = ("schema", "t", "records", "progress", "analysis", "scoreboard", "cache", "verdicts", "seen")
"""Every key of a stored state, in the order :meth:`ConsolidationState.to_json` writes them."""
MIGRATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""Older format id → function returning the state in the next format (applied until
:data:`STATE_SCHEMA`). Empty: ``rsi-consolidation-state/1`` is the first format."""


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _stars(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def signal_digest(signals: Mapping[str, Any] | None) -> str:
    """First 16 hex chars of SHA-256 over the canonical signal summary (docs/algorithm/consolidation.md §3.2).

    Only what can change a criterion enters the digest; the implicit verdict counts when its kind
    is ``correction``, ``complaint`` or ``accept`` (its ``evidence`` and ``error`` never do).
    """
    if not signals and _EMPTY is not None:  # most worlds: no signal (the same digest, not re-hashed)
        return _EMPTY
    s = dict(signals or {})
    implicit = s.get("implicit")
    imp: dict[str, Any] | None = None
    if isinstance(implicit, Mapping) and implicit.get("kind") in IMPLICIT_KINDS_WITH_DIGEST:
        imp = {"kind": implicit["kind"], "criterion": str(implicit.get("criterion") or "")}
    summary = {
        "expected": str(s.get("expected") or "").strip(),
        "stars": _stars(s.get("stars")),
        "issue": str(s.get("issue") or "").strip(),
        "comment": str(s.get("comment") or "").strip(),
        "criteria": [str(c).strip() for c in (s.get("criteria") or []) if str(c).strip()],
        "implicit": imp,
    }
    return hashlib.sha256(_canonical(summary)).hexdigest()[:16]


_EMPTY: str | None = None
EMPTY_DIGEST = _EMPTY = signal_digest({})


def _copy_json(x: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, tuples, scalars) — several times faster than
    ``copy.deepcopy``, which every run pays on the whole state (verdict and replay caches)."""
    if isinstance(x, dict):
        return {k: _copy_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_copy_json(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_copy_json(v) for v in x)
    return x


@dataclass
class ConsolidationState:
    """Mutable working copy of one agent's state; serialise with :meth:`to_json`."""

    t: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    progress: list[float] = field(default_factory=lambda: [0.0])
    analysis: dict[str, Any] = field(default_factory=lambda: {"failure_modes": [], "success_habits": []})
    scoreboard: list[dict[str, Any]] = field(default_factory=list)
    cache: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    verdicts: dict[str, list[Any]] = field(default_factory=dict)
    seen: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": STATE_SCHEMA,
            "t": self.t,
            "records": _copy_json(self.records),
            "progress": list(self.progress),
            "analysis": _copy_json(self.analysis),
            "scoreboard": _copy_json(self.scoreboard),
            "cache": _copy_json(self.cache),
            "verdicts": _copy_json(self.verdicts),
            "seen": dict(self.seen),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any] | None) -> ConsolidationState:
        """Load a stored state (``None`` = the empty state); see the module docstring.

        Raises:
            StoredDataError: naming the field: an unknown format id or key, a value of the wrong type.
        """
        d = migrate_state(obj)
        f.closed("state", d, STATE_KEYS)
        analysis = f.obj("state.analysis", d.get("analysis") or {})
        f.closed("state.analysis", analysis, ("failure_modes", "success_habits"))
        cache = f.obj("state.cache", d.get("cache") or {})
        verdicts = d.get("verdicts") or {}
        return cls(
            t=f.integer("state.t", d.get("t", 0), 0),
            records=f.json_objects("state.records", d.get("records") or []),
            progress=[
                f.number(f.sub("state.progress", i), x)
                for i, x in enumerate(f.json_array("state.progress", d.get("progress") or []))
            ] or [0.0],
            analysis={
                key: f.json_objects(f.sub("state.analysis", key), analysis.get(key) or [])
                for key in ("failure_modes", "success_habits")
            },
            scoreboard=f.json_objects("state.scoreboard", d.get("scoreboard") or []),
            cache={v: f.object_lists(f.sub("state.cache", v), per) for v, per in cache.items()},
            verdicts=f.array_map("state.verdicts", verdicts),
            seen=f.text_map("state.seen", d.get("seen") or {}),
        )

    def copy(self) -> ConsolidationState:
        return ConsolidationState.from_json(self.to_json())

    def set_analysis(self, report: Mapping[str, Any]) -> None:
        """Replace the analysis by the report's first 12 modes and habits; an empty report keeps it."""
        modes = [
            {"mode": str(m.get("mode", "")), "description": str(m.get("description", ""))}
            for m in report.get("failure_modes") or []
            if isinstance(m, Mapping) and m.get("mode")
        ][:ANALYSIS_KEEP]
        habits = [
            {"habit": str(h.get("habit", "")), "description": str(h.get("description", ""))}
            for h in report.get("success_habits") or []
            if isinstance(h, Mapping) and h.get("habit")
        ][:ANALYSIS_KEEP]
        if modes or habits:
            self.analysis = {"failure_modes": modes, "success_habits": habits}

    def add_scoreboard(self, rows: Iterable[Mapping[str, Any]]) -> None:
        self.scoreboard = (self.scoreboard + [dict(r) for r in rows])[-SCOREBOARD_KEEP:]

    def advance_round(self, t: int, gain: float) -> None:
        """``progress = progress[:t+1]`` padded with 0.0, then append ``progress[t] + max(0, gain)``."""
        prog = list(self.progress[: t + 1])
        while len(prog) < t + 1:
            prog.append(0.0)
        prog.append(prog[t] + max(0.0, gain))
        self.progress = prog
        self.t = t + 1

    def set_seen(self, digests: Mapping[str, str], keep_ids: Sequence[str]) -> bool:
        """Store the digests the run saw, keeping only ids of the latest loaded worlds; returns
        whether ``seen`` changed.

        An id without an entry reads as :data:`EMPTY_DIGEST` (no signal), so empty digests are not
        stored: a world recorded without a signal changes nothing, and a no-signal run leaves the
        stored state as it is (docs/performance/consolidation.md#the-no-signal-path)."""
        keep = set(keep_ids)
        merged = {k: v for k, v in self.seen.items() if k in keep and v != EMPTY_DIGEST}
        merged.update({k: v for k, v in digests.items() if k in keep and v != EMPTY_DIGEST})
        changed = merged != self.seen
        self.seen = merged
        return changed


def migrate_state(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of a stored state in format :data:`STATE_SCHEMA` (``None`` = ``{}``; a missing
    ``schema`` is version 1).

    Raises:
        StoredDataError: not an object, or a format id this code does not know.
    """
    out = dict(f.obj("state", {} if obj is None else obj))
    seen: set[str] = set()
    while (schema := out.get("schema", STATE_SCHEMA)) != STATE_SCHEMA:
        step = MIGRATIONS.get(schema) if isinstance(schema, str) else None
        if step is None or schema in seen:
            raise StoredDataError(f"state.schema: unknown consolidation state format {safe_repr(schema)} "
                                  f"(this code reads {STATE_SCHEMA})")
        seen.add(schema)
        out = step(out)
    return out


def trim_records(
    records: Sequence[Mapping[str, Any]], t_now: int, history_rounds: int = 200
) -> list[dict[str, Any]]:
    """Keep rows with ``t ≥ t_now − history_rounds + 1``; rows without ``t`` are kept."""
    floor = t_now - history_rounds + 1
    out: list[dict[str, Any]] = []
    for r in records:
        t = r.get("t")
        if t is None or int(t) >= floor:
            out.append(dict(r))
    return out


def remember(
    state: ConsolidationState,
    version: str,
    results_by_world: Mapping[str, Sequence[Mapping[str, Any]]],
    k: int,
) -> None:
    """Cache up to ``k`` replay results per world under ``version`` (docs/algorithm/consolidation.md §3.6.5).

    ``results_by_world`` holds ReplayResult JSON of ``replay``-source, non-missing trials in trial
    order; the transcript is dropped; a world's entry is replaced.
    """
    per = state.cache.setdefault(version, {})
    for world_id, results in results_by_world.items():
        kept = [{k2: v for k2, v in r.items() if k2 != "transcript"} for r in results][:k]
        if kept:
            per[world_id] = kept


def prune_cache(
    state: ConsolidationState, keep: Sequence[str], cache_versions: int = 3, verdict_cache: int = 4000
) -> None:
    """Drop the oldest cached versions not in ``keep`` beyond ``cache_versions``; cap the verdicts."""
    while len(state.cache) > cache_versions:
        victim = next((v for v in state.cache if v not in keep), None)
        if victim is None:
            break
        del state.cache[victim]
    if len(state.verdicts) > verdict_cache:
        excess = len(state.verdicts) - verdict_cache
        for key in list(state.verdicts)[:excess]:
            del state.verdicts[key]
