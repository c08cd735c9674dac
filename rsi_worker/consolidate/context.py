"""What every pipeline step needs: outside dependencies (:class:`Deps`) and the run's own
persisted context (:class:`RoundContext`, stored in ``rsi_runs.params``).

Steps never pass Python objects to each other: each one loads what it needs from SQL (the run
row, world rows, replay rows, the agent's stored state) and stores what later steps need. That
makes every step a Celery task body and a plain function at once, and a redelivered step sees
exactly what the first delivery stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from sqlalchemy.orm import Session, sessionmaker

from rsi_common.config import ConsolidationParams, Settings
from rsi_common.coord import Coordinator
from rsi_common.credentials import safe_repr
from rsi_common.db import get_harness, get_world
from rsi_common.db.models import WorldRow
from rsi_common.harness import Harness, h0, materialize
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse, make_client, role_client
from rsi_common.stored import StoredDataError
from rsi_common.world import TurnWorld
from rsi_worker.consolidate import fields as f
from rsi_worker.consolidate.round import Round
from rsi_worker.observability.metrics import NULL_METRICS, Metrics

__all__ = [
    "CONTEXT_SCHEMA",
    "CONTEXT_V1",
    "MIGRATIONS",
    "PHASES",
    "CountingClient",
    "Deps",
    "ModelFactory",
    "RoundContext",
    "default_models",
    "load_harness",
    "migrate_context",
    "turn_world",
]


class ModelFactory(Protocol):
    """Builds the client of one role (``policy`` for replays) for the agent's model."""

    def __call__(self, provider: str, model: str, role: str) -> ModelClient: ...


def default_models(settings: Settings) -> ModelFactory:
    """Real factories from settings: role overrides for the consolidation roles
    (docs/algorithm/formulas.md §1.6)."""

    def build(provider: str, model: str, role: str) -> ModelClient:
        if role in ("policy", "compact"):
            return make_client(provider, model, settings, role=role)
        return role_client(role, provider, model, settings)

    return build


class CountingClient:
    """A client wrapper that counts calls and tokens (role usage is evolution cost, docs/formats.md §6)."""

    def __init__(self, inner: ModelClient) -> None:
        self.inner = inner
        self.provider = inner.provider
        self.model = inner.model
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self._lock = threading.Lock()

    def complete(self, request: ModelRequest) -> ModelResponse:
        response = self.inner.complete(request)
        with self._lock:
            self.calls += 1
            self.input_tokens += response.usage.input_tokens
            self.output_tokens += response.usage.output_tokens
        return response

    def usage(self) -> dict[str, int]:
        return {"calls": self.calls, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


@dataclass(frozen=True)
class Deps:
    """The outside world of a consolidation step; passed in, never global."""

    settings: Settings
    sessions: sessionmaker[Session]
    coord: Coordinator
    models: ModelFactory
    on_harness_change: Callable[[str], None] | None = None
    """Called with the agent id after an adoption (default: publish on ``rsi:harness``)."""
    metrics: Metrics = NULL_METRICS
    """Where runs and trials are counted (:mod:`rsi_worker.observability.metrics`; the no-op unless a
    worker serves)."""

    @property
    def params(self) -> ConsolidationParams:
        return self.settings.consolidation

    def role(self, ctx: RoundContext, role: str) -> CountingClient:
        """A counting client of ``role`` for the run's agent model."""
        return CountingClient(self.models(ctx.provider, ctx.model, role))


CONTEXT_SCHEMA = "rsi-run-context/2"
"""The format of ``rsi_runs.params`` this code writes (docs/formats.md#run-context-and-round)."""
CONTEXT_V1 = "rsi-run-context/1"
"""The first format: written without a ``schema`` key (a stored context without one is version 1)."""
PHASES = ("open", "incumbent", "drafting", "candidates")
"""A run's phases, in order: opened, incumbent replays launched, drafting, candidate replays launched."""


def _from_v1(d: dict[str, Any]) -> dict[str, Any]:
    """Version 1 → 2: the fields added while version 1 was written (``lessons``, ``skipped_worlds``,
    ``force``; the round's ``incumbent.sources`` and ``judged.learned``) take their defaults, and
    the context says its version. Version 2 requires every field."""
    out = dict(d, schema=CONTEXT_SCHEMA)
    out.setdefault("lessons", [])
    out.setdefault("skipped_worlds", {})
    out.setdefault("force", False)
    rnd = out.get("round")
    if isinstance(rnd, Mapping):
        rnd = dict(rnd)
        if isinstance(rnd.get("incumbent"), Mapping):
            rnd["incumbent"] = {**rnd["incumbent"], "sources": rnd["incumbent"].get("sources", {})}
        if isinstance(rnd.get("judged"), Mapping):
            rnd["judged"] = {**rnd["judged"], "learned": rnd["judged"].get("learned", [])}
        out["round"] = rnd
    return out


MIGRATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {CONTEXT_V1: _from_v1}
"""Older format id → function returning the context in the next format (applied until
:data:`CONTEXT_SCHEMA`); a step builds new objects and never changes a nested value of its input."""


def migrate_context(obj: object) -> dict[str, Any]:
    """A copy of a stored context in format :data:`CONTEXT_SCHEMA` (the input is not changed).

    Raises:
        StoredDataError: not an object, or a format id this code does not know.
    """
    out = dict(f.obj("params", obj))  # each step returns a new object and changes nothing nested
    seen: set[str] = set()
    while (schema := out.get("schema", CONTEXT_V1)) != CONTEXT_SCHEMA:
        step = MIGRATIONS.get(schema) if isinstance(schema, str) else None
        if step is None or schema in seen:
            raise StoredDataError(
                f"params.schema: unknown run context format {safe_repr(schema)} (this code reads "
                f"{CONTEXT_SCHEMA} and migrates {', '.join(sorted(MIGRATIONS))})")
        seen.add(schema)
        out = step(out)
    return out


def _phase(path: str, x: object) -> str:
    if f.text(path, x) not in PHASES:
        raise StoredDataError(f"{path}: unknown phase {safe_repr(x)} (one of {', '.join(PHASES)})")
    return str(x)


def _count(path: str, x: object) -> int:
    return f.integer(path, x, 0)


def _object_map(path: str, x: object) -> dict[str, dict[str, Any]]:
    return {k: f.json_object(f.sub(path, k), v) for k, v in f.obj(path, x).items()}


def _round(path: str, x: object) -> Round:
    return Round.from_json(x, path)


def _usage(path: str, x: object) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for role, u in f.obj(path, x).items():
        where = f.sub(path, role)
        d = f.obj(where, u)
        f.closed(where, d, USAGE_KEYS)
        out[role] = {k: f.integer(f.sub(where, k), d.get(k, 0), 0) for k in USAGE_KEYS}
    return out


USAGE_KEYS = ("calls", "input_tokens", "output_tokens")
_READERS: dict[str, Callable[[str, Any], Any]] = {
    "run_id": f.text, "agent_id": f.text, "fence": _count, "token": f.text, "io_id": f.optional_text,
    "phase": _phase, "t": _count, "start_version": f.optional_text, "inc_version": f.text,
    "provider": f.text, "model": f.text, "latest": f.optional_text, "loaded": f.texts,
    "digests": f.text_map, "fresh": f.texts, "worlds": f.texts, "checks": f.object_lists,
    "signals_read": _object_map, "usage": _usage, "slots": f.object_lists, "round": _round,
    "analysis": f.json_object, "lessons": f.json_objects, "early_stop": f.boolean, "force": f.boolean,
    "skipped_worlds": f.text_map,
}
"""How each field of the current format is read (every field is required)."""


@dataclass
class RoundContext:
    """The run's persisted context (``rsi_runs.params``, format :data:`CONTEXT_SCHEMA`); grows as
    the steps advance. :meth:`from_json` migrates an older format and refuses unknown keys."""

    run_id: str
    agent_id: str
    fence: int
    token: str
    io_id: str | None
    phase: str = "open"
    """One of :data:`PHASES`."""
    t: int = 0
    start_version: str | None = None
    inc_version: str = ""
    provider: str = "sim"
    model: str = "sim-1"
    latest: str | None = None
    loaded: list[str] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)
    fresh: list[str] = field(default_factory=list)
    worlds: list[str] = field(default_factory=list)
    """W, in ``per_task`` order."""
    checks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    signals_read: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    slots: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Candidate → trial slots (``TrialSlot`` JSON)."""
    round: Round = field(default_factory=Round)
    """The round (:mod:`rsi_worker.consolidate.round`): incumbent, parameters, judgement."""
    analysis: dict[str, Any] = field(default_factory=dict)
    lessons: list[dict[str, Any]] = field(default_factory=list)
    """The lessons replayed this round: ``{world_id, lesson, run_id, version}`` (the regression set)."""
    early_stop: bool = True
    force: bool = False
    """Every scored world counts as fresh in this run (``open_run(force=True)``)."""
    skipped_worlds: dict[str, str] = field(default_factory=dict)
    """Stored rows the run left out, world id → reason (``WorldPool``; reported in the result)."""
    refine: dict[str, Any] = field(default_factory=dict)
    """A refine run's request ``{id, focus, criteria, requested_by}`` (docs/runtime/refine.md#run);
    ``{}`` for every other run. Optional in the format: written only when set (older contexts and
    ordinary runs keep their bytes)."""

    SCHEMA: ClassVar[str] = CONTEXT_SCHEMA
    """The format version :meth:`to_json` writes."""

    def to_json(self) -> dict[str, Any]:
        """``schema`` first, then every field in declaration order."""
        out: dict[str, Any] = {"schema": CONTEXT_SCHEMA}
        for name in _READERS:
            value = getattr(self, name)
            out[name] = value.to_json() if name == "round" else value
        if self.refine:
            out["refine"] = dict(self.refine)
        return out

    @classmethod
    def from_json(cls, d: object) -> RoundContext:
        """A stored context of any known format.

        Raises:
            StoredDataError: naming the field: an unknown format or key, a missing field, a value
                of the wrong type.
        """
        data = migrate_context(d)
        f.closed("params", data, ("schema", *_READERS, "refine"))
        values = {}
        for name, read in _READERS.items():
            if name not in data:
                raise StoredDataError(f"params: missing key {name!r}")
            values[name] = read(f.sub("params", name), data[name])
        if "refine" in data:
            values["refine"] = dict(f.json_object("params.refine", data["refine"]))
        return cls(**values)


def turn_world(row: WorldRow) -> TurnWorld:
    """A stored world row as the pipeline's :class:`TurnWorld`."""
    return TurnWorld(
        id=row.id,
        data=dict(row.world or {}),
        signals=dict(row.signals or {}),
        interaction_id=row.interaction_id or "",
        seq=int(row.seq or 0),
    )


def load_worlds(session: Session, ids: Sequence[str], agent_id: str | None = None) -> dict[str, TurnWorld]:
    """World rows by id; with ``agent_id``, a world no longer stored is read from the agent's lessons
    (the regression set keeps its own copy). Ids found nowhere are left out."""
    out: dict[str, TurnWorld] = {}
    for wid in ids:
        world = load_world(session, wid, agent_id)
        if world is not None:
            out[wid] = world
    return out


def load_world(session: Session, world_id: str, agent_id: str | None = None) -> TurnWorld | None:
    """One world (see :func:`load_worlds`), or None."""
    row = get_world(session, world_id)
    if row is not None:
        return turn_world(row)
    if agent_id is None:
        return None
    from rsi_common.db import regression_world
    from rsi_worker.consolidate.regression import lesson_world

    lesson = regression_world(session, agent_id, world_id)
    return lesson_world(lesson) if lesson is not None else None


def load_harness(session: Session, agent_id: str, version: str | None) -> Harness:
    """The stored harness of ``version`` (``None`` = H0), tamper-checked."""
    if version is None:
        return h0()
    return materialize(get_harness(session, agent_id, version).payload)
