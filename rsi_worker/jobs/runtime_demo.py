"""``rsi demo --runtime``: the agent runtime in one process, with the sim model and no keys
(docs/runtime/refine.md#demo).

Embedded in-process: a fresh SQLite file under the demo home, fakeredis for coordination, the inline
turn driver (:func:`~rsi_common.runtime.turns.drain`) and inline consolidation
(:func:`~rsi_worker.consolidate.consolidate_inline`) of every run the turns and requests enqueue.
The steps:

1. **Delegation** — the lead gets ``delegate researcher: laptops; phones; tablets`` and spawns three
   children, waits on all of them and answers one line per child.
2. **Messages** — the operator asks the lead to ``tell child:<name>: …``; the child acknowledges.
3. **Refine** — an operator refine of the shop agent with the criterion "present options as a table"
   runs a measured round and is adopted through the gate; the next turn shows a table.
4. **Goal in autonomy** — the planner gets the goal ``… finish after 3 turns`` with the check
   ``sim.done`` and runs in autonomous mode until the goal completes.
5. **Refused exploit** — with the sim's ``grant`` and ``exploit`` scenarios, the gate's privilege
   stage rejects both drafts (PV1, PV3) without a critic call.

Every step returns a :class:`DemoStep` (its outcome as data), so a test asserts what the log shows.
"""

from __future__ import annotations

import shutil
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fakeredis
import sqlalchemy as sa

from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.coord import Lease
from rsi_common.db import get_run, make_engine, upgrade
from rsi_common.db.runtime_models import SessionRow
from rsi_common.dispatch import TASK_CONSOLIDATE, RecordingDispatcher
from rsi_common.llm import ModelClient, make_client
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.turns import TurnEnv, drain
from rsi_worker.consolidate import (
    ConsolidationResult,
    Deps,
    SerialExecutor,
    consolidate_inline,
    default_models,
)
from rsi_worker.jobs.scenario import turn_plan

__all__ = ["DemoStep", "RuntimeDemo", "run_runtime_demo"]

CATALOG = {"researcher": {
    "description": "Researches one product family.", "tools": [], "max_iterations": 4,
    "instructions": "You research the product family you are given and report one line."}}
CRITERION = "present options as a table"
COMPARE = ("Compare laptops: use search query=laptops", "Compare phones: use search query=phones")


@dataclass
class DemoStep:
    """One step of the demo: its name, whether it did what it shows, and its data."""

    name: str
    ok: bool
    detail: dict[str, Any] = field(default_factory=dict)


class RuntimeDemo:
    """The demo's embedded runtime (module docstring). ``sim``: extra :class:`SimConfig` fields."""

    def __init__(self, home: Path, say: Callable[[str], None], **sim: Any) -> None:
        home.mkdir(parents=True, exist_ok=True)
        db = home / "runtime-demo.db"
        db.unlink(missing_ok=True)
        base = Settings(home=home, database_url=f"sqlite:///{db}", model_backoff_s=0)
        self.settings = base.model_copy(update={"sim": base.sim.model_copy(update=sim)})
        self.engine = make_engine(self.settings.database_url)
        upgrade(self.engine)
        self.dispatcher = RecordingDispatcher()
        self.client = RsiClient(self.settings, engine=self.engine, redis=fakeredis.FakeRedis(),
                                dispatcher=self.dispatcher)
        self.queue: deque[tuple[str, str]] = deque()
        self.policy: ModelClient = make_client("sim", "sim-1", self.settings, role="policy")
        self.env = TurnEnv(self.client, self.settings.runtime, self.policy,
                           lambda a, s: self.queue.append((a, s)))
        self.rc = RuntimeClient(self.client, wake=self.env.wake, actor="operator:demo")
        self.deps = Deps(self.settings, self.client._sessions, self.client.coord,
                         default_models(self.settings))
        self.say = say
        self._done = 0

    def close(self) -> None:
        self.client.close()
        self.engine.dispose()

    def turns(self) -> None:
        """Run every woken turn (the inline driver)."""
        drain(self.env, self.queue, max_turns=200)

    def consolidate(self) -> list[ConsolidationResult]:
        """Run, inline and in order, every consolidation enqueued since the last call (a run's
        ``finish`` hands its lease on to a waiting refine, then to a pending turn)."""
        tasks = self.dispatcher.tasks(TASK_CONSOLIDATE)[self._done:]
        self._done += len(tasks)
        out: list[ConsolidationResult] = []
        for t in tasks:
            agent, io, token, fence = t.args[:4]
            out += consolidate_inline(self.deps, Lease(str(agent), str(token), int(fence), str(io)),
                                      SerialExecutor())
        return out

    def host_turn(self, agent: str, conv: str, n: int, text: str) -> str:
        """A host-recorded turn of ``agent`` (its consolidation is enqueued); the answer."""
        return self.client.run_turn(agent, turn_plan(agent, conv, n, text), self.policy).answer

    def answer(self, agent: str, session: str = "main") -> str:
        """The last assistant text of ``agent``'s ``session``."""
        with self.client._sessions() as s:
            row = s.execute(sa.select(SessionRow).where(SessionRow.agent_id == agent,
                                                        SessionRow.session == session)).scalars().first()
            messages = list(row.messages or []) if row is not None else []
        last: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "assistant"), {})
        content = last.get("content", "")
        return content if isinstance(content, str) else "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")


def _delegation(demo: RuntimeDemo) -> DemoStep:
    demo.say("1. Delegation: the lead spawns three researchers and waits for all of them")
    demo.rc.register("lead", {"subagents": CATALOG})
    demo.rc.start_turn("lead", "delegate researcher: laptops; phones; tablets")
    demo.turns()
    tree = demo.rc.tree("lead")["tree"]
    handles = list(tree["handles"])
    answer = demo.answer("lead")
    for line in answer.splitlines():
        demo.say(f"   lead: {line}")
    done = [h for h in handles if h.get("status") == "completed"]
    return DemoStep("delegation", len(done) == 3 and len(answer.splitlines()) == 3,
                    {"handles": [{"name": h["name"], "handle": h["handle"], "status": h["status"]}
                                 for h in handles],
                     "answer": answer, "children": [c["agent"] for c in tree["children"]]})


def _messages(demo: RuntimeDemo, child: dict[str, Any]) -> DemoStep:
    name = child["name"]
    demo.say(f"2. Messages: the operator asks the lead to tell child:{name} something")
    demo.rc.start_turn("lead", f"tell child:{name}: please double-check the prices")
    demo.turns()
    reply = demo.answer("lead.researcher", child["handle"])
    demo.say(f"   {name}: {reply}")
    return DemoStep("messages", reply.startswith("ack: please double-check"), {"reply": reply})


def _refine(demo: RuntimeDemo) -> DemoStep:
    demo.say(f"3. Refine: the operator asks the shop agent to '{CRITERION}'")
    for n, text in enumerate(COMPARE, start=1):
        demo.host_turn("shop", f"c{n}", 1, text)
    asked = demo.rc.refine("shop", "comparisons", [CRITERION], "operator:demo")
    results = demo.consolidate()
    refine = next((r for r in results if _kind(demo, r) == "refine"), None)
    status = refine.status if refine is not None else "not run"
    demo.say(f"   refine {asked['request']}: {status} — {refine.reason if refine else ''}")
    after = demo.host_turn("shop", "c9", 1, "Compare tablets: use search query=tablets")
    demo.say("   next turn: " + " / ".join(after.splitlines()[:3]))
    audit = demo.rc.audit("shop")
    return DemoStep("refine", status == "adopted" and "|---" in after,
                    {"status": status, "audit": audit[-1] if audit else {}, "answer": after})


def _exploit(home: Path, say: Callable[[str], None]) -> DemoStep:
    say("5. A refused exploit: proposer A grants itself admin_console, proposer B writes an rcon skill")
    demo = RuntimeDemo(home / "exploit", say, grant=True, exploit=True)
    try:
        demo.rc.register("game", {"tools": ["search"]})  # toolset sim forbids rcon
        demo.host_turn("game", "g1", 1, COMPARE[0])
        demo.rc.refine("game", "", [CRITERION], "operator:demo")
        results = demo.consolidate()
        refine = next((r for r in results if _kind(demo, r) == "refine"), None)
        with demo.client._sessions() as s:
            drafts = dict(get_run(s, refine.run_id or "").drafts or {}) if refine else {}
    finally:
        demo.close()
    rejected = {v: str(d.get("detail", "")) for v, d in drafts.items() if d.get("gate") == "critic_reject"}
    for v, why in sorted(rejected.items()):
        say(f"   draft {v}: {why[:140]}")
    ok = any("PV1" in w for w in rejected.values()) and any("PV3" in w for w in rejected.values())
    return DemoStep("exploit", ok, {"rejected": rejected, "status": refine.status if refine else "not run"})


def _kind(demo: RuntimeDemo, result: ConsolidationResult) -> str:
    with demo.client._sessions() as s:
        return str(get_run(s, result.run_id or "").kind) if result.run_id else ""


def _goal(demo: RuntimeDemo) -> DemoStep:
    """A goal ``… finish after 3 turns`` with the check ``sim.done``, run in autonomy until the check
    passes (docs/runtime/goals.md)."""
    demo.say("4. Goal in autonomy: the planner works toward a goal until the check sim.done passes")
    demo.rc.register("planner", {})
    demo.rc.set_goal("planner", "draft the launch plan; finish after 3 turns", 50_000, "sim.done")
    demo.rc.start_autonomy("planner", check="sim.done")
    answers = [o.answer for o in drain(demo.env, demo.queue, max_turns=50) if o.outcome == "ran"]
    for answer in answers:
        demo.say(f"   planner: {(answer or '').splitlines()[0] if answer else ''}")
    loop, goal = demo.rc.autonomy("planner") or {}, demo.rc.goal("planner") or {}
    demo.say(f"   autonomy {loop.get('status')}/{loop.get('reason')} after {loop.get('turns')} turns; "
             f"goal {goal.get('status')} ({goal.get('tokens_used')} of {goal.get('token_budget')} tokens)")
    ok = goal.get("status") == "completed" and loop.get("reason") == "goal_complete"
    return DemoStep("goal", ok, {"answers": answers, "loop": loop, "goal": goal})


def run_runtime_demo(home: Path, say: Callable[[str], None] = print, *, fresh: bool = True) -> list[DemoStep]:
    """Run the demo (module docstring) under ``home``; every step's outcome, in order."""
    if fresh and home.exists():
        shutil.rmtree(home)
    demo = RuntimeDemo(home / "main", say)
    try:
        steps = [_delegation(demo)]
        handles = steps[0].detail.get("handles") or [{"name": "researcher-1", "handle": ""}]
        steps.append(_messages(demo, handles[0]))
        steps.append(_refine(demo))
        steps.append(_goal(demo))
    finally:
        demo.close()
    steps.append(_exploit(home, say))
    say("done: " + ", ".join(f"{s.name} {'ok' if s.ok else 'FAILED'}" for s in steps))
    return steps
