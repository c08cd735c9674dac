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
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from rsi_common.config import ConsolidationParams, Settings
from rsi_common.coord import Coordinator
from rsi_common.db import get_harness, get_world
from rsi_common.db.models import WorldRow
from rsi_common.harness import Harness, h0, materialize
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse, make_client, role_client
from rsi_common.world import TurnWorld
from rsi_worker.observability.metrics import NULL_METRICS, Metrics

__all__ = [
    "CountingClient",
    "Deps",
    "ModelFactory",
    "RoundContext",
    "default_models",
    "load_harness",
    "turn_world",
]


class ModelFactory(Protocol):
    """Builds the client of one role (``policy`` for replays) for the agent's model."""

    def __call__(self, provider: str, model: str, role: str) -> ModelClient: ...


def default_models(settings: Settings) -> ModelFactory:
    """Real factories from settings: role overrides for the consolidation roles (SPEC §1.6)."""

    def build(provider: str, model: str, role: str) -> ModelClient:
        if role in ("policy", "compact"):
            return make_client(provider, model, settings, role=role)
        return role_client(role, provider, model, settings)

    return build


class CountingClient:
    """A client wrapper that counts calls and tokens (role usage is evolution cost, SPEC §6)."""

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


@dataclass
class RoundContext:
    """The run's persisted context (``rsi_runs.params``); grows as the steps advance."""

    run_id: str
    agent_id: str
    fence: int
    token: str
    io_id: str | None
    phase: str = "open"
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
    round: dict[str, Any] = field(default_factory=dict)
    """Round parameters of SPEC §3.3 step 10 (δ, S★, b_t, σ, enabled, tried, reserved, prune, …)."""
    analysis: dict[str, Any] = field(default_factory=dict)
    lessons: list[dict[str, Any]] = field(default_factory=list)
    """The lessons replayed this round: ``{world_id, lesson, run_id, version}`` (the regression set)."""
    early_stop: bool = True
    force: bool = False
    """Every scored world counts as fresh in this run (``open_run(force=True)``)."""
    skipped_worlds: dict[str, str] = field(default_factory=dict)
    """Stored rows the run left out, world id → reason (``WorldPool``; reported in the result)."""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RoundContext:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


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
