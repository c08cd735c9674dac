"""``rsi bench runtime --roots R --children C [--kills K]``: the agent runtime on real workers
(docs/runtime/README.md#benchmarks).

Starts a private PostgreSQL and redis-server and ``workers`` processes of ``rsi worker -Q agents -P
threads -c threads`` whose policy model is :func:`sim_factory`: a root spawns one child per topic of
its input, waits on all of them and answers ``summary: <answers>``; a child makes two model calls of
``SIM_DELAY_S`` each (one ``budget_get`` tool call, then ``finding on <topic>``). The bench process
runs ``rsi.tick``'s pass every second (it recovers the turns of killed workers). ``R`` roots × ``C``
children are started at once; the run ends when every root's turn committed.

* **wall** — from the first enqueue to the last root's commit (SQL polled every 0.1 s), against
  1.3 × Σ child model time ÷ capacity, capacity = min(workers × threads, roots × children): R11's
  ÷ 128 for its shape, the children that can run at once for a smaller one (:func:`_capacity`);
* **lost / duplicated** — handles not ``completed``, handles settled more than once (``settle``
  events), ios with more than one world, root answers that differ from the undisturbed answer;
* with ``kills``: that many ``kill -9`` of a random worker (restarted at once) at random moments of
  the first ``kill_window_s`` seconds, with ``RSI_VISIBILITY_TIMEOUT_S`` 10 and
  ``RSI_RUNTIME__TURN_LEASE_S`` 5.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db import upgrade
from rsi_common.db.runtime_models import EventRow, SessionRow, SpendRow, SubagentRow
from rsi_common.dispatch import QUEUE_AGENTS, TASK_AGENT_TURN, KombuDispatcher
from rsi_common.kernel.testing import ScriptedModel
from rsi_common.llm import ModelRequest, ModelResponse, Usage
from rsi_common.runtime.caps import resolve_caps
from rsi_common.runtime.messages import Sender, send
from rsi_common.runtime.tick import tick
from rsi_common.runtime.tree import AgentProfile, register
from rsi_common.runtime.turns import TurnEnv, marked_wake
from rsi_worker.consolidate import ModelFactory, default_models
from rsi_worker.local.servers import PostgresServer, RedisServer

__all__ = ["SIM_DELAY_S", "bench_runtime_cluster", "sim_factory", "sim_policy"]

LEAD = "You are the lead. Delegate each topic."
CHILD = "You are a worker. Answer with one finding."
SIM_DELAY_S = 0.2
SIM_CALLS = 2
CATALOG = {"worker": {"description": "answers one topic", "tools": [], "max_iterations": 4,
                      "instructions": CHILD}}


def _reply(content: list[dict[str, Any]], stop: str = "end_turn") -> ModelResponse:
    return ModelResponse(content=content, usage=Usage(input_tokens=100, output_tokens=20), stop_reason=stop,
                         model="sim-1")


def sim_policy(request: ModelRequest) -> ModelResponse:
    """One answer of the bench's lead or child (module docstring)."""
    last = request.messages[-1]["content"]
    results = [b for b in (last if isinstance(last, list) else []) if b.get("type") == "tool_result"]
    if CHILD in request.system:
        time.sleep(SIM_DELAY_S)
        if not results:
            return _reply([{"type": "tool_use", "id": "b1", "name": "budget_get", "input": {}}], "tool_use")
        first = next(m["content"] for m in request.messages if m["role"] == "user")
        return _reply([{"type": "text", "text": f"finding on {str(first).splitlines()[-1]}"}])
    if not results:
        topics = [t.strip() for t in str(last).splitlines()[-1].split(";") if t.strip()]
        return _reply([{"type": "tool_use", "id": f"s{i}", "name": "subagent_spawn",
                        "input": {"spec": "worker", "input": t}} for i, t in enumerate(topics)], "tool_use")
    if results[0]["tool_use_id"].startswith("s"):
        handles = [json.loads(r["content"])["handle"] for r in results]
        return _reply([{"type": "tool_use", "id": "w1", "name": "subagent_wait",
                        "input": {"handles": handles}}], "tool_use")
    answers = [x["answer"] or x["status"] for x in json.loads(results[0]["content"])["results"]]
    return _reply([{"type": "text", "text": "summary: " + "; ".join(answers)}])


def sim_factory(settings: Settings) -> ModelFactory:
    """Workers' model factory (``RSI_MODEL_FACTORY=rsi_worker.bench.runtime_cluster:sim_factory``):
    :func:`sim_policy` for ``policy``, the defaults for every other role."""
    base = default_models(settings)

    def build(provider: str, model: str, role: str) -> Any:
        if role == "policy":
            return ScriptedModel([sim_policy], repeat_last=True, provider="sim", model="sim-1")
        return base(provider, model, role)

    return build


class _Workers:
    def __init__(self, home: Path, env: dict[str, str], n: int, threads: int) -> None:
        self.home, self.env, self.threads = home, env, threads
        self.procs = [self._spawn(i) for i in range(n)]

    def _spawn(self, i: int) -> subprocess.Popen[bytes]:
        log = open(self.home / f"worker{i}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [sys.executable, "-m", "rsi_worker.cli", "worker", "-Q", QUEUE_AGENTS, "-P", "threads", "-c",
             str(self.threads), "-n", f"bench{i}-{os.getpid()}@%h", "-l", "WARNING", "--no-supervise"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return proc

    def kill(self, rng: random.Random) -> None:
        i = rng.randrange(len(self.procs))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[i].pid, signal.SIGKILL)
        self.procs[i].wait(30)
        self.procs[i] = self._spawn(i)

    def stop(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


def bench_runtime_cluster(*, roots: int = 10, children: int = 10, workers: int = 2, threads: int = 64,
                          kills: int = 0, kill_window_s: float = 20.0, seed: int = 0,
                          timeout_s: float = 600.0) -> dict[str, Any]:
    """Run ``roots`` × ``children`` on ``workers`` × ``threads`` with ``kills`` random ``kill -9``
    (module docstring); returns the report."""
    with tempfile.TemporaryDirectory(prefix="rsi-bench-rtc-") as tmp:
        home = Path(tmp)
        pg = PostgresServer(home / "pg").start()
        rs = RedisServer(home / "redis").start()
        try:
            params = {"RSI_RUNTIME__MAX_RUNNING_PER_TREE": str(children),
                      "RSI_RUNTIME__MAX_LIVE_CHILDREN": str(children),
                      "RSI_RUNTIME__MAX_SPAWNS_PER_TURN": str(children),
                      "RSI_RUNTIME__TURN_LEASE_S": "5", "RSI_VISIBILITY_TIMEOUT_S": "10",
                      # no daily token caps: a killed attempt is charged its whole reservation
                      # (200,000 tokens), and a kill storm would otherwise refuse the tree's turns
                      "RSI_RUNTIME__TREE_TOKENS_PER_DAY": "0", "RSI_RUNTIME__AGENT_TOKENS_PER_DAY": "0",
                      "RSI_TASK_SOFT_TIME_LIMIT_S": "6", "RSI_TASK_TIME_LIMIT_S": "8"}
            env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RSI_")}
            env.update(params, RSI_DATABASE_URL=pg.url, RSI_REDIS_URL=rs.url, RSI_HOME=str(home / "home"),
                       RSI_MODEL_FACTORY="rsi_worker.bench.runtime_cluster:sim_factory")
            rt = RuntimeParams(max_running_per_tree=children, max_live_children=children,
                               max_spawns_per_turn=children, turn_lease_s=5, tree_tokens_per_day=0,
                               agent_tokens_per_day=0)
            settings = Settings(database_url=pg.url, redis_url=rs.url, home=home / "home", runtime=rt)
            dispatcher = KombuDispatcher(rs.url)
            client = RsiClient(settings, redis=redis.Redis.from_url(rs.client_url), dispatcher=dispatcher)
            upgrade(client.engine)
            pool = _Workers(home, env, workers, threads)
            try:
                return _run(client, settings, dispatcher, pool, roots=roots, children=children, kills=kills,
                            kill_window_s=kill_window_s, seed=seed, timeout_s=timeout_s)
            finally:
                pool.stop()
                client.close()
        finally:
            rs.stop()
            pg.stop()


def _run(client: RsiClient, settings: Settings, dispatcher: KombuDispatcher, pool: _Workers, *, roots: int,
         children: int, kills: int, kill_window_s: float, seed: int, timeout_s: float) -> dict[str, Any]:
    def enqueue(agent: str, session: str) -> None:
        dispatcher.enqueue(TASK_AGENT_TURN, [agent, session], QUEUE_AGENTS)

    env = TurnEnv(client, settings.runtime, ScriptedModel([sim_policy]), marked_wake(client.redis, enqueue))
    caps = resolve_caps(settings.runtime)
    names = [f"r{i}" for i in range(roots)]
    topics = [f"t{j}" for j in range(children)]
    with env.factory.begin() as s:
        for name in names:
            register(s, name, AgentProfile(system_parts=(("lead", LEAD),), subagents=CATALOG))
            send(s, client.redis, settings.runtime, caps, Sender(None, io=f"op-{name}"), name,
                 "; ".join(topics))
    _wait_ready(pool, settings)
    rng = random.Random(seed)
    expected_wall = children * roots * SIM_CALLS * SIM_DELAY_S / _capacity(len(pool.procs) * pool.threads,
                                                                           roots, children)
    stop = threading.Event()
    killed: deque[float] = deque()
    t0 = time.perf_counter()
    for name in names:
        enqueue(name, "main")

    def ticker() -> None:
        while not stop.wait(1.0):
            with contextlib.suppress(Exception):
                tick(env)

    def killer() -> None:
        moments = sorted(rng.uniform(0.5, kill_window_s) for _ in range(kills))
        for at in moments:
            if stop.wait(max(0.0, at - (time.perf_counter() - t0))):
                return
            pool.kill(rng)
            killed.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=ticker, daemon=True), threading.Thread(target=killer, daemon=True)]
    for t in threads:
        t.start()
    done_at = _wait_done(env, names, t0, timeout_s)
    stop.set()
    for t in threads:
        t.join(60)
    return _report(env, names, topics, done_at, expected_wall, pool, kills, list(killed))


def _wait_ready(pool: _Workers, settings: Settings, timeout_s: float = 120.0) -> None:
    from rsi_worker.cluster.app import create_app

    app = create_app(settings)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in pool.procs):
            raise RuntimeError(f"a bench worker exited; see {pool.home}/worker*.log")
        if len(app.control.ping(timeout=0.5) or []) >= len(pool.procs):
            return
    raise RuntimeError(f"bench workers not ready after {timeout_s} s; see {pool.home}/worker*.log")


def _wait_done(env: TurnEnv, names: list[str], t0: float, timeout_s: float) -> float | None:
    """Seconds from ``t0`` to the moment every root's turn committed (``None``: timed out)."""
    while time.perf_counter() - t0 < timeout_s:
        with env.factory() as s:
            done = s.execute(sa.select(sa.func.count()).select_from(SessionRow).where(
                SessionRow.agent_id.in_(names), SessionRow.session == "main", SessionRow.turns >= 1,
                SessionRow.pending.is_(None))).scalar_one()
        if done == len(names):
            return time.perf_counter() - t0
        time.sleep(0.1)
    return None


def _last_text(messages: list[Any]) -> str | None:
    """The text of the session's last message when it is the final answer (else ``None``)."""
    content = messages[-1]["content"] if messages else None
    if isinstance(content, list) and content and content[0].get("type") == "text":
        return str(content[0]["text"])
    return None


def _capacity(threads: int, roots: int, children: int) -> int:
    """Children that can run at once: the worker threads, but no more than the tree slots
    (``MAX_RUNNING_PER_TREE`` = ``children`` per root here) nor the children there are. R11's shape
    (100 roots × 10 on 2 × 64 threads) gives RUNTIME's 128; a smaller run has fewer children than
    threads, and Σ ÷ 128 would then be shorter than one child's own calls (``SIM_CALLS`` ×
    ``SIM_DELAY_S``), which no schedule can reach."""
    return max(1, min(threads, roots * children))


def _report(env: TurnEnv, names: list[str], topics: list[str], done_at: float | None, expected_wall: float,
            pool: _Workers, kills: int, killed: list[float]) -> dict[str, Any]:
    want = "summary: " + "; ".join(f"finding on {t}" for t in topics)
    with env.factory() as s:
        handles = list(s.execute(sa.select(SubagentRow.id, SubagentRow.status)).all())
        errors = dict(s.execute(sa.select(SubagentRow.error, sa.func.count()).where(
            SubagentRow.status != "completed").group_by(SubagentRow.error)).all())
        settles = s.execute(sa.select(EventRow.detail).where(EventRow.kind == "settle")).scalars().all()
        answers = {r.agent_id: _last_text(r.messages)
                   for r in s.execute(sa.select(SessionRow).where(SessionRow.agent_id.in_(names))).scalars()}
        failed = [dict(e.detail, agent=e.agent_id) for e in s.execute(
            sa.select(EventRow).where(EventRow.kind == "turn_failed")).scalars()]
        dup_worlds = s.execute(sa.text("SELECT count(*) FROM (SELECT agent_id, io_id FROM rsi_worlds "
                                       "GROUP BY agent_id, io_id HAVING count(*) > 1) d")).scalar_one()
        lost_keys = s.execute(sa.select(sa.func.count()).select_from(SpendRow).where(
            SpendRow.kind == "lost")).scalar_one()
    per_handle: dict[str, int] = {}
    for d in settles:
        per_handle[d["handle"]] = per_handle.get(d["handle"], 0) + 1
    n = len(names) * len(topics)
    sigma = n * SIM_CALLS * SIM_DELAY_S
    capacity = _capacity(len(pool.procs) * pool.threads, len(names), len(topics))
    target = 1.3 * sigma / capacity
    report: dict[str, Any] = {
        "roots": len(names), "children": n, "workers": len(pool.procs), "threads": pool.threads,
        "sim_calls_x_delay_s": [SIM_CALLS, SIM_DELAY_S], "kills": kills,
        "killed_at_s": [round(k, 2) for k in killed],
        "wall_s": None if done_at is None else round(done_at, 2),
        "sigma_child_model_s": round(sigma, 1), "capacity": capacity, "wall_target_s": round(target, 2),
        "wall_over_bound": None if done_at is None else round(done_at / (sigma / capacity), 2),
        "handles": len(handles), "handles_completed": sum(1 for _, st in handles if st == "completed"),
        "handles_lost": n - sum(1 for _, st in handles if st == "completed"),
        "handles_settled_twice": sum(1 for c in per_handle.values() if c > 1),
        "handle_errors": {str(k): int(v) for k, v in errors.items()},
        "duplicate_worlds": int(dup_worlds), "lost_charges": int(lost_keys),
        "answers_equal_undisturbed": sum(1 for a in answers.values() if a == want),
        "answers_differing": {k: (a or "")[:300] for k, a in sorted(answers.items()) if a != want},
        "timed_out": done_at is None, "turns_failed": failed,
    }
    report["wall_met"] = done_at is not None and done_at <= target
    report["exactly_once_met"] = (report["handles_lost"] == 0 and report["handles_settled_twice"] == 0
                                  and report["duplicate_worlds"] == 0
                                  and report["answers_equal_undisturbed"] == len(names))
    return report
