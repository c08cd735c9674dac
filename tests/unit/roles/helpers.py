"""Helpers of the role tests: the docs/formats.md demo scenario, views, a round context and a scripted
model."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rsi_common.config import ConsolidationParams, SimConfig
from rsi_common.harness import Harness, h0
from rsi_common.kernel import RetryPolicy, TurnPlan, run_turn
from rsi_common.kinds import K_ENABLED_PRODUCTION
from rsi_common.llm import ModelRequest, ModelResponse, Usage
from rsi_common.llm.sim import SimClient
from rsi_common.math import Exploration, exploration
from rsi_common.replay import PolicySpec, replay_world
from rsi_common.world import TurnWorld
from rsi_worker.consolidate.draft import DraftContext
from rsi_worker.consolidate.evaluate import score
from rsi_worker.consolidate.signals import checks_for
from rsi_worker.roles.analyst import View, analyze
from rsi_worker.roles.judge import CriteriaJudge, request_text
from rsi_worker.roles.signal import implicit_signal

NO_RETRY = RetryPolicy(retries=0, backoff_s=0.0)
CORRECTION = "No, show it as a table and keep the recommendation to one line"
REQUESTS = (
    "Which laptop should I buy? Compare: Alpha 999 EUR, Beta 1099 EUR",
    "Which phone should I pick? Compare: Gamma 499 EUR, Delta 549 EUR",
)
PASSING_REQUEST = "Pick a drink for me: tea, coffee"
CLOCK = 1_700_000_000.0


def _turn(request: str, conv: str, seq: int, history: list[dict[str, Any]], harness: Harness) -> TurnWorld:
    plan = TurnPlan(input=request, agent_id="agent-1", io_id=f"io-{conv}-{seq}", interaction_id=conv,
                    provider="sim", model="sim-1", name="demo",
                    system_parts=[("identity", "You are a careful shopping assistant.")],
                    messages=history, clock=CLOCK + 10 * seq + len(conv))
    result = run_turn(plan, harness, SimClient("sim-1", SimConfig()), retry=NO_RETRY)
    assert result.world is not None
    return TurnWorld(id=f"w_{conv}_{seq}_" + "0" * 16, data=result.world, interaction_id=conv, seq=seq)


def demo_worlds(harness: Harness | None = None) -> list[TurnWorld]:
    """Two conversations corrected with :data:`CORRECTION` and one accepted; signals read by the sim."""
    inc = harness or h0()
    worlds: list[TurnWorld] = []
    convs = [(f"c{i}", req, CORRECTION) for i, req in enumerate(REQUESTS, start=1)]
    convs.append(("c3", PASSING_REQUEST, "Thanks, perfect"))
    reader = SimClient("sim-1", role="signal")
    for conv, request, reply in convs:
        first = _turn(request, conv, 1, [], inc)
        history = [{"role": "user", "content": request},
                   {"role": "assistant", "content": [{"type": "text", "text": first.answer}]}]
        second = _turn(reply, conv, 2, history, inc)
        first.signals["implicit"] = implicit_signal(reader, first.request, first.answer, second.request)
        worlds += [first, second]
    return worlds


def view_of(world: TurnWorld, harness: Harness, seed: int = 0) -> View:
    """One replay of ``world`` under ``harness``, judged by the sim judge."""
    checks = checks_for(world.signals, answer=world.answer)
    result = replay_world(world, harness, PolicySpec("sim", "sim-1"), seed=seed,
                          llm_factory=lambda _p: SimClient("sim-1"), retry=NO_RETRY)
    judge = CriteriaJudge(SimClient("sim-1", role="judge"))
    r, w, verdicts = score(checks, request_text(world.request, world.history), result.answer, judge.verdict)
    passed = sum(1 for v in verdicts if v["pass"])
    row = {"candidate": "incumbent", "world_id": world.id, "trial": seed, "source": "replay", "status": "ok",
           "reward": r, "weight": w, "tokens": result.policy_tokens,
           "result": {"replay": result.to_json(), "passed": passed, "verdicts": verdicts}}
    return View(world, row, tuple(checks), r, tuple(verdicts))


def demo_views(worlds: Sequence[TurnWorld], harness: Harness | None = None) -> list[View]:
    """Views of the scored worlds (those with checks), like step 11 of
    docs/algorithm/consolidation.md §3.3."""
    inc = harness or h0()
    return [view_of(w, inc) for w in worlds if checks_for(w.signals, answer=w.answer)]


def demo_context(*, worlds: Sequence[TurnWorld] | None = None, harness: Harness | None = None,
                 expl: Exploration | None = None, reserved: Iterable[int] = (), b_t: int = 3, t: int = 0,
                 params: ConsolidationParams | None = None, records: Sequence[dict[str, Any]] = (),
                 analysis: dict[str, Any] | None = None) -> DraftContext:
    """A round context over the demo scenario (the sim analyst's report unless given)."""
    inc = harness or h0()
    ws = list(worlds) if worlds is not None else demo_worlds(inc)
    views = demo_views(ws, inc)
    report = analysis if analysis is not None else analyze(SimClient("sim-1", role="analyst"), views, {})
    S = sum(v.mean * len(v.checks) for v in views) / max(1, sum(len(v.checks) for v in views))
    return DraftContext(
        incumbent=inc, t=t, b_t=b_t, S_t=S, delta=0.25, params=params or ConsolidationParams(),
        records=tuple(records), analysis=report,
        exploration=expl or exploration(0, set(), 1, enabled=K_ENABLED_PRODUCTION),
        reserved=frozenset(reserved), enabled=K_ENABLED_PRODUCTION, views=tuple(views), worlds=tuple(ws),
    )


Reply = str | dict[str, Any] | Callable[[ModelRequest], str]


class Scripted:
    """A model client replying with scripted texts (dicts are sent as JSON); records every request.

    When the script is exhausted the last reply repeats.
    """

    provider = "scripted"
    model = "scripted-1"

    def __init__(self, replies: Sequence[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        item = self.replies[min(len(self.requests), len(self.replies)) - 1]
        text = item(request) if callable(item) else item if isinstance(item, str) else json.dumps(item)
        return ModelResponse([{"type": "text", "text": text}], Usage(10, 5), "end_turn", self.model)

    def results(self) -> list[str]:
        """The tool's answers, in order (the user messages after the first of the last request)."""
        last = self.requests[-1].messages
        return [str(m["content"]) for m in last[2::2]]


def edit(eid: str = "E1", component: str = "prompt", **extra: Any) -> dict[str, Any]:
    """A declared edit with every required field."""
    return {"id": eid, "component": component, "hypothesis": "a general instruction helps",
            "targets_mode": "missing-table", "predicted_affected": [], "retroactive_check": "corrective: -",
            **extra}
