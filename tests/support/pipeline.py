"""A whole consolidation stack on real components for tests: SQL (SQLite or PostgreSQL),
the coordination protocol (fakeredis or a real redis-server), the sim model, the real kernel.

Turns are run live through the kernel with the agent's current harness and stored as worlds,
then consolidated in-process with the same step functions the Celery tasks call.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fakeredis
import redis

from rsi_common.config import Settings
from rsi_common.coord import Coordinator, Lease
from rsi_common.db import get_agent, make_engine, save_world, session_factory, upgrade, world_by_io
from rsi_common.harness import Harness
from rsi_common.kernel import TurnResult
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse, Usage, make_client
from rsi_worker.consolidate import (
    ConsolidationResult,
    ConsolidationState,
    Deps,
    ModelFactory,
    SerialExecutor,
    TrialExecutor,
    consolidate_inline,
    default_models,
)
from rsi_worker.consolidate.context import load_harness
from rsi_worker.jobs.scenario import conversation_turn, next_history
from tests.support.migrated import migrate_or_copy


@dataclass
class Stack:
    """One agent platform under test."""

    settings: Settings
    redis_client: Any = None
    models: ModelFactory | None = None
    policy_client: ModelClient | None = None
    """The live turns' model (default: the sim policy); its provider and model are recorded in the
    worlds, so consolidation replays and roles use the same provider."""
    clock: itertools.count[int] = field(default_factory=lambda: itertools.count(1_700_000_000, 60))
    histories: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    turns: dict[tuple[str, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        copied = migrate_or_copy(self.settings.database_url)  # a new SQLite file: the migrated template
        self.engine = make_engine(self.settings.database_url)
        if not copied:
            upgrade(self.engine)
        self.sessions = session_factory(self.engine)
        client = self.redis_client or fakeredis.FakeRedis(server=fakeredis.FakeServer())
        self.coord = Coordinator(client, lease_s=self.settings.lease_s)
        self.deps = Deps(
            self.settings, self.sessions, self.coord, self.models or default_models(self.settings)
        )

    def close(self) -> None:
        self.engine.dispose()

    # --- turns -------------------------------------------------------------------------------

    def harness(self, agent: str) -> Harness:
        with self.sessions() as s:
            try:
                version = get_agent(s, agent).current_version
            except KeyError:
                version = None
            return load_harness(s, agent, version)

    def policy(self) -> ModelClient:
        if self.policy_client is not None:
            return self.policy_client
        return make_client("sim", "sim-1", self.settings, role="policy")

    def say(self, agent: str, conv: str, text: str, signals: Mapping[str, Any] | None = None) -> TurnResult:
        """Run one live turn of ``conv`` with the agent's current harness and store its world."""
        key = (agent, conv)
        n = self.turns.get(key, 0) + 1
        history = self.histories.get(key, [])
        client = self.policy()
        plan = {"provider": client.provider, "model": client.model, "clock": float(next(self.clock))}
        turn = conversation_turn(client, self.harness(agent), agent, conv, n, text, history, **plan)
        assert turn.world is not None, turn.events
        with self.sessions() as s:
            save_world(s, agent, turn.world, dict(signals or {}), retention=self.settings.world_retention)
            s.commit()
        self.turns[key] = n
        self.histories[key] = next_history(history, text, turn.answer)
        return turn

    def converse(self, agent: str, conv: str, texts: Sequence[str]) -> list[TurnResult]:
        return [self.say(agent, conv, t) for t in texts]

    # --- consolidation -----------------------------------------------------------------------

    def lease(self, agent: str, io: str) -> Lease:
        lease = self.coord.try_begin(agent, io)
        assert lease is not None, "another run holds the lease"
        return lease

    def consolidate(
        self, agent: str, turn: TurnResult | None = None, executor: TrialExecutor | None = None
    ) -> ConsolidationResult:
        """One run for ``turn`` (default: the agent's newest world) and its re-runs; the first result."""
        io = turn.world["io_id"] if turn is not None and turn.world else self.latest_io(agent)
        results = consolidate_inline(self.deps, self.lease(agent, io), executor or SerialExecutor())
        assert results, "the run produced no result"
        return results[0]

    def latest_io(self, agent: str) -> str:
        from rsi_common.db import load_latest_worlds

        with self.sessions() as s:
            return str(load_latest_worlds(s, agent, 1)[0].io_id)

    def state(self, agent: str) -> ConsolidationState:
        with self.sessions() as s:
            return ConsolidationState.from_json(get_agent(s, agent).state)

    def current_version(self, agent: str) -> str | None:
        with self.sessions() as s:
            return get_agent(s, agent).current_version

    def world_id(self, agent: str, turn: TurnResult) -> str:
        with self.sessions() as s:
            row = world_by_io(s, agent, turn.world["io_id"] if turn.world else "")
            assert row is not None
            return str(row.id)


def real_redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


# --- model doubles for specific scenarios -----------------------------------------------------

_VARIANT = re.compile(r"You draft variant ([A-H]) ")


def _reply(text: str) -> ModelResponse:
    return ModelResponse(
        content=[{"type": "text", "text": text}],
        usage=Usage(input_tokens=10, output_tokens=max(1, len(text) // 4)),
        stop_reason="end_turn",
        model="scripted",
    )


class ScriptedProposer:
    """A proposer that plays a fixed action list per variant; other variants go to ``fallback``.

    The n-th reply of a conversation is the n-th action (n = assistant messages so far).
    """

    provider, model = "scripted", "scripted"

    def __init__(self, scripts: Mapping[str, Sequence[Mapping[str, Any]]], fallback: ModelClient) -> None:
        self.scripts = {k: list(v) for k, v in scripts.items()}
        self.fallback = fallback

    def complete(self, request: ModelRequest) -> ModelResponse:
        first = request.messages[0]["content"] if request.messages else ""
        text = first if isinstance(first, str) else json.dumps(first)
        m = _VARIANT.search(text)
        variant = m.group(1) if m else ""
        if variant not in self.scripts:
            return self.fallback.complete(request)
        n = sum(1 for msg in request.messages if msg.get("role") == "assistant")
        script = self.scripts[variant]
        return _reply(json.dumps(script[min(n, len(script) - 1)]))


class MarkerPolicy:
    """The policy model, except that a harness whose system prompt holds ``marker`` gets ``answer``."""

    def __init__(self, inner: ModelClient, marker: str, answer: str = "I cannot help with that.") -> None:
        self.inner, self.marker, self.answer = inner, marker, answer
        self.provider, self.model = inner.provider, inner.model
        self.calls = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        if self.marker in request.system:
            self.calls += 1
            return _reply(self.answer)
        return self.inner.complete(request)


def models_with(settings: Settings, **overrides: Any) -> ModelFactory:
    """The default model factory with some roles replaced: ``overrides[role](default_client)``."""
    base = default_models(settings)

    def build(provider: str, model: str, role: str) -> ModelClient:
        client = base(provider, model, role)
        wrap = overrides.get(role)
        return wrap(client) if wrap is not None else client

    return build


def edit_action(old: str, new: str, path: str = "manifest.json") -> dict[str, Any]:
    return {"action": "edit_file", "path": path, "old": old, "new": new}


def done_action(
    component: str, hypothesis: str, predicted: Sequence[str] = (), **extra: Any
) -> dict[str, Any]:
    edit = {
        "id": "E1",
        "component": component,
        "hypothesis": hypothesis,
        "targets_mode": "missing-table",
        "predicted_affected": list(predicted),
        "retroactive_check": "corrective: fixes the failing worlds",
    }
    edit.update(extra)
    return {"action": "done", "summary": hypothesis, "edits": [edit]}
