"""One trial of an evolve run: a task under a harness, scored by its checks
(docs/algorithm/evolve.md#trials).

* A world-backed task is replayed (docs/formats.md §4.2, :func:`rsi_common.replay.replay_world`).
* A request-backed task goes through the **request adapter** (``run(task, harness, policy) → trial``):
  one fresh turn of the kernel with the suite's ``system`` prompt, the request as input, no tools and
  no history, the trial index as the model seed.

Checks: ``answer_criteria`` by the criteria judge (docs/algorithm/consolidation.md §3.7, a verdict cache
per trial), ``contains`` and ``regex`` by deterministic verifiers. ``r = passed / checks``, ``w = checks``.
The function never raises for a replay, judge or model failure: those are a ``missing`` trial.
The result is a plain dict, the stored row's fields (``status, reward, weight, tokens, result``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rsi_common.harness import Harness
from rsi_common.kernel import RetryPolicy, TurnPlan, run_turn
from rsi_common.llm import ModelClient
from rsi_common.replay import PolicySpec, ReplayResult, cut_transcript, kept_answer, replay_world
from rsi_common.world import TurnWorld
from rsi_worker.evolve.suite import MAX_REGEX_ANSWER, Suite, Task
from rsi_worker.roles.judge import CriteriaJudge, request_text

__all__ = ["TrialEnv", "check_passes", "request_world", "run_task", "score_checks"]

MAX_JUDGE_THREADS = 8
RoleFactory = Callable[[str], ModelClient]
"""``role → client`` for the run's provider and model (``policy`` for the turns, ``judge`` for checks)."""


@dataclass(frozen=True)
class TrialEnv:
    """What a trial needs: the suite, the role clients, the loaded worlds of world-backed tasks."""

    suite: Suite
    role: RoleFactory
    provider: str
    model: str
    worlds: Mapping[str, TurnWorld]
    retry: RetryPolicy | None = None


def request_world(suite: Suite, task: Task) -> TurnWorld:
    """The world a request-backed task stands for (for rendering views): input = the request."""
    return TurnWorld(
        id=task.id, data={"input": task.request or "", "plan": {"system_parts": [["suite", suite.system]]}}
    )


def check_passes(check: Mapping[str, Any], answer: str) -> tuple[bool, str]:
    """A deterministic verifier (``contains`` / ``regex``; a pattern searches the answer's first
    :data:`~rsi_worker.evolve.suite.MAX_REGEX_ANSWER` characters)."""
    if check["kind"] == "contains":
        ok = str(check["text"]).lower() in answer.lower()
        return ok, "found" if ok else "not found"
    ok = re.search(str(check["pattern"]), answer[:MAX_REGEX_ANSWER]) is not None
    return ok, "matched" if ok else "no match"


def score_checks(
    checks: Sequence[Mapping[str, Any]], request: str, answer: str, judge: CriteriaJudge | None
) -> tuple[float, int, list[dict[str, Any]]]:
    """``(r = passed / len(checks), w = len(checks), verdicts)``; ``judge`` grades ``answer_criteria``
    (the checks of one answer are judged in parallel, at most :data:`MAX_JUDGE_THREADS` at once)."""

    def one(check: Mapping[str, Any]) -> dict[str, Any]:
        if check.get("kind", "answer_criteria") == "answer_criteria":
            assert judge is not None
            ok, reason = judge.verdict(request, answer, str(check["criterion"]), check.get("reference"))
        else:
            ok, reason = check_passes(check, answer)
        return {"name": check["name"], "criterion": check["criterion"], "pass": ok, "reason": reason}

    if len(checks) > 1 and judge is not None:  # the checks of one answer are independent calls
        with ThreadPoolExecutor(max_workers=min(len(checks), MAX_JUDGE_THREADS)) as pool:
            verdicts = list(pool.map(one, checks))
    else:
        verdicts = [one(c) for c in checks]
    passed = sum(1 for v in verdicts if v["pass"])
    return (passed / len(checks) if checks else 0.0), len(checks), verdicts


def _adapter(env: TrialEnv, task: Task, harness: Harness, seed: int) -> ReplayResult:
    io = "io_" + hashlib.sha256(f"{env.suite.name}/{task.id}".encode()).hexdigest()[:16]
    plan = TurnPlan(
        input=task.request or "",
        agent_id="evolve",
        io_id=io,
        interaction_id=io,
        session_id=io,
        provider=env.provider,
        model=env.model,
        name="suite",
        system_parts=[("suite", env.suite.system)],
        clock=0.0,
    )
    try:
        turn = run_turn(
            plan, harness, env.role("policy"), record_world=False, seed=seed, retry=env.retry, lineage="agent"
        )
    except Exception as exc:  # a missing trial, never a crash of the run
        return ReplayResult(world_id=task.id, error=f"{type(exc).__name__}: {exc}"[:500])
    return ReplayResult(
        world_id=task.id,
        source="replay",
        answer=kept_answer(turn.answer),
        status=turn.status,
        termination_reason=turn.termination_reason,
        policy_tokens=turn.policy_tokens,
        steps=turn.steps,
        params_read=sorted(turn.params_read),
        transcript=cut_transcript(turn.transcript),
        error=turn.error if turn.status == "failed" else "",
    )


def run_task(env: TrialEnv, task: Task, harness: Harness, seed: int) -> dict[str, Any]:
    """Run one trial of ``task`` under ``harness`` with model seed ``seed`` (module docstring)."""
    checks = list(task.checks)
    if task.world_id is not None:
        world = env.worlds.get(task.world_id)
        if world is None:
            return {"status": "missing", "weight": len(checks), "result": {"error": "world no longer stored"}}
        replay = replay_world(
            world,
            harness,
            PolicySpec(env.provider, env.model),
            seed=seed,
            llm_factory=lambda p: env.role("policy"),
            retry=env.retry,
        )
        request = request_text(world.request, world.history)
    else:
        replay = _adapter(env, task, harness, seed)
        request = task.request or ""
    if replay.missing:
        return {
            "status": "missing",
            "weight": len(checks),
            "result": {"replay": replay.to_json(), "error": replay.error},
        }
    judge = None
    if any(c.get("kind", "answer_criteria") == "answer_criteria" for c in checks):
        judge = CriteriaJudge(env.role("judge"), cache={})
    try:
        reward, weight, verdicts = score_checks(checks, request, replay.answer, judge)
    except Exception as exc:  # the judge failed: the trial is missing
        return {
            "status": "missing",
            "weight": len(checks),
            "result": {"replay": replay.to_json(), "error": f"judge: {type(exc).__name__}"[:300]},
        }
    passed = sum(1 for v in verdicts if v["pass"])
    return {
        "status": "ok",
        "reward": reward,
        "weight": weight,
        "tokens": replay.policy_tokens or None,
        "result": {"replay": replay.to_json(), "passed": passed, "verdicts": verdicts},
    }
