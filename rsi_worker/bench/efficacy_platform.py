"""One noise level of ``rsi bench efficacy``: a whole consolidation stack in this process.

SQLite in a directory, the coordination protocol on fakeredis, the sim model at the level's noise,
the real kernel. Live turns run with the agent's current harness and are stored as worlds the way a
host records them; every stored turn is then consolidated with :func:`consolidate_inline` (serially,
so a seed repeats exactly). Held-out turns run through the same kernel with a given harness and are
never stored. Only public entry points are used, so the bench measures whatever consolidation does.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import fakeredis

from rsi_common.config import RoleModels, Settings, SimConfig
from rsi_common.coord import Coordinator
from rsi_common.db import get_agent, get_harness, make_engine, save_world, session_factory, upgrade
from rsi_common.harness import H0_VERSION, Harness, h0, materialize
from rsi_common.kernel import TurnPlan, TurnResult, run_turn
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse, make_client
from rsi_common.llm.sim.roles import judge_verdict
from rsi_worker.bench.efficacy_metrics import H0
from rsi_worker.bench.efficacy_pool import SYSTEM_PARTS, criterion, lookup_tool
from rsi_worker.consolidate import ConsolidationResult, Deps, ModelFactory, SerialExecutor, consolidate_inline
from rsi_worker.consolidate import default_models as _default_models

__all__ = ["HELDOUT_CLOCK", "Platform", "has_trait", "version_key"]

HELDOUT_CLOCK = 1_600_000_000.0
"""Clock of held-out turn ``i`` is this + 60·i: the same under every harness (common random numbers)."""
LIVE_CLOCK = 1_700_000_000
"""Clock of an agent's first live turn; each later turn is a minute later. Every agent has its own
clock, so an agent's turns do not depend on which other agents share its platform."""
PROBE = "Compare the options: Alpha 10 EUR, Beta 20 EUR"
"""Request of the probe turn whose system prompt and tools are a harness's prompt surface."""


def has_trait(request: str, answer: str, trait: str) -> bool:
    """The sim judge's verdict on ``answer`` for the trait's criterion (:func:`criterion`)."""
    return judge_verdict(request, answer, criterion(trait))[0]


def version_key(version: str | None) -> str:
    """:data:`H0` for the initial harness, else the version id."""
    return H0 if version is None or version == H0_VERSION else version


class _Capture:
    """A policy client that records the first request it sees (system prompt and tools)."""

    def __init__(self, inner: ModelClient) -> None:
        self.inner = inner
        self.provider, self.model = inner.provider, inner.model
        self.first: ModelRequest | None = None

    def complete(self, request: ModelRequest) -> ModelResponse:
        if self.first is None:
            self.first = request
        return self.inner.complete(request)


class Platform:
    """One in-process platform (module docstring).

    Args:
        home: directory of the SQLite file.
        noise: the sim model's noise (live turns, replays and held-out turns alike).
        seed: the sim model's global seed.
    """

    def __init__(self, home: Path, noise: float, seed: int) -> None:
        home.mkdir(parents=True, exist_ok=True)
        # the sim model in every role whatever the environment says; consolidation parameters
        # (RSI_CONSOLIDATION__*) stay configurable
        self.settings = Settings(database_url=f"sqlite:///{home / 'rsi.db'}", model_backoff_s=0,
                                 sim=SimConfig(noise=noise, seed=seed), roles=RoleModels())
        self.engine = make_engine(self.settings.database_url)
        upgrade(self.engine)
        self.sessions = session_factory(self.engine)
        redis = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        self.coord = Coordinator(redis, lease_s=self.settings.lease_s)
        self.deps = Deps(self.settings, self.sessions, self.coord, _default_models(self.settings))
        self.policy = make_client("sim", "sim-1", self.settings, role="policy")
        self.clocks: dict[str, itertools.count[int]] = {}
        self.histories: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.seq: dict[tuple[str, str], int] = {}
        self.harnesses: dict[tuple[str, str], Harness] = {}

    def close(self) -> None:
        self.engine.dispose()

    def configure(self, settings: Settings, models: ModelFactory | None = None) -> None:
        """From now on run turns and consolidations with ``settings`` (its sim model and consolidation
        parameters; the database URL is not re-read) and ``models`` (default: from ``settings``)."""
        self.settings = settings
        self.deps = Deps(settings, self.sessions, self.coord, models or _default_models(settings))
        self.policy = make_client("sim", "sim-1", settings, role="policy")

    # --- harnesses -------------------------------------------------------------------------

    def version(self, agent: str) -> str | None:
        """The agent's current version (``None``: H0, or no agent yet)."""
        with self.sessions() as s:
            try:
                return get_agent(s, agent).current_version
            except KeyError:
                return None

    def harness(self, agent: str, version: str | None) -> Harness:
        """A stored version of ``agent`` (``None`` or H0's id: H0), materialised once."""
        key = (agent, version_key(version))
        if key not in self.harnesses:
            if key[1] == H0:
                self.harnesses[key] = h0()
            else:
                with self.sessions() as s:
                    self.harnesses[key] = materialize(get_harness(s, agent, key[1]).payload)
        return self.harnesses[key]

    def surface(self, harness: Harness) -> str:
        """The harness's effective prompt surface: the system prompt and tools of a probe turn, then
        the text of every harness file (``rsi_worker.bench.efficacy_metrics``, "No-op")."""
        capture = _Capture(self.policy)
        run_turn(self._plan("probe", "probe", 1, PROBE, [], HELDOUT_CLOCK), harness, capture)
        request = capture.first
        assert request is not None, "the probe turn made no model call"
        tools = [f"tool {t.get('name')}: {t.get('description', '')} "
                 f"{json.dumps(t.get('input_schema', {}), sort_keys=True, ensure_ascii=False)}"
                 for t in request.tools or []]
        files = [harness.files[p] for p in sorted(harness.files)]
        return "\n".join([request.system, *tools, *files])

    # --- turns -----------------------------------------------------------------------------

    def _plan(self, agent: str, conv: str, n: int, text: str, history: Sequence[Mapping[str, Any]],
              clock: float) -> TurnPlan:
        return TurnPlan(input=text, agent_id=agent, io_id=f"io-{agent}-{conv}-{n}", interaction_id=conv,
                        session_id=conv, provider="sim", model="sim-1", name="planner",
                        system_parts=SYSTEM_PARTS, messages=list(history), tools=(lookup_tool(),),
                        clock=clock)

    def say(self, agent: str, conv: str, text: str) -> TurnResult:
        """One live turn of ``conv`` under the agent's current harness, stored as a world."""
        key = (agent, conv)
        n = self.seq.get(key, 0) + 1
        history = self.histories.get(key, [])
        clock = self.clocks.setdefault(agent, itertools.count(LIVE_CLOCK, 60))
        plan = self._plan(agent, conv, n, text, history, float(next(clock)))
        turn = run_turn(plan, self.harness(agent, self.version(agent)), self.policy)
        if turn.world is None:
            raise RuntimeError(f"turn {n} of {agent}/{conv} recorded no world: {turn.events}")
        with self.sessions() as s:
            save_world(s, agent, turn.world, {}, retention=self.settings.world_retention)
            s.commit()
        self.seq[key] = n
        self.histories[key] = [*history, {"role": "user", "content": text},
                               {"role": "assistant", "content": turn.answer}]
        return turn

    def consolidate(self, agent: str, turn: TurnResult) -> list[ConsolidationResult]:
        """Consolidate after ``turn`` as a host would (lease for the turn, then the run and its re-runs)."""
        io = str(turn.world["io_id"]) if turn.world else ""
        lease = self.coord.try_begin(agent, io)
        if lease is None:
            raise RuntimeError(f"the lease of {agent} is held")
        return consolidate_inline(self.deps, lease, SerialExecutor())

    def answer(self, agent: str, harness: Harness, text: str, index: int) -> str:
        """Held-out turn ``index``: ``text`` answered under ``harness``, never stored."""
        plan = self._plan(agent, f"heldout-{index}", 1, text, [], HELDOUT_CLOCK + 60.0 * index)
        return run_turn(plan, harness, self.policy).answer
