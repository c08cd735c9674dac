"""``rsi bench runtime --turn-cost``: what one child turn costs, counted (docs/runtime/turn-cost.md).

A private PostgreSQL and redis-server, the inline driver, a policy that answers at once (sim latency
0) the way the cluster bench's child does (``budget_get``, then one line of text). ``n`` children are
spawned from one root, each in its own transaction that is not counted; then each child's turn is run
by :func:`~rsi_common.runtime.turns.run_session_turn` and everything it does is counted, per turn:

* SQL statements by kind and table (``before_cursor_execute``), transactions begun and committed,
  connection checkouts (each one a ``pool_pre_ping`` round trip on PostgreSQL);
* Redis commands by name (scripts as ``EVALSHA``/``EVAL`` with their first key), on the turn's Redis
  client, pipelined ones included (and the pipelines counted);
* wakes (Celery hops on the cluster: one ``rsi.agent_turn`` enqueue each);
* JSON encodes and decodes (``json.JSONEncoder.encode``, ``json.JSONDecoder.decode``: the engine's
  serializer, worlds, tool results);
* CPU ms of the calling thread (``time.thread_time``) by step, each step exclusive of the steps it
  calls; the steps are the turn's functions, wrapped for the run and restored after.

Counts do not move with the machine's load; the CPU ms do a little (a loaded machine has colder
caches) and are reported as the median over the ``n`` turns.
"""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams
from rsi_common.llm import ModelRequest, ModelResponse, Usage
from rsi_common.runtime import attempts, turns
from rsi_common.runtime.caps import resolve_caps
from rsi_common.runtime.subagents import SpawnRequest, SpecEntry, spawn
from rsi_common.runtime.tree import AgentProfile, register
from rsi_common.runtime.turns import TurnEnv, run_session_turn
from rsi_worker.bench.runtime import private_client

__all__ = ["TurnCounter", "bench_turn_cost", "statement_table"]

CHILD = "You are a worker. Answer with one finding."
CATALOG: dict[str, dict[str, Any]] = {
    "worker": {"description": "answers one topic", "tools": [], "max_iterations": 4, "instructions": CHILD}}
# (module attribute owner, name): the turn's steps, wrapped while counting
_TURN_STEPS = ("_load", "_slotted_turn", "_granted_turn", "_spec", "_stored_or_run", "_commit", "claim",
               "db_day", "reserve_want", "goal_notes", "runtime_tools", "run_turn", "finalize_world",
               "after_logical_turn", "set_lifecycle", "wake_after_commit", "start_refines")
_ATTEMPT_STEPS = ("begin", "end")
_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN)\s+\"?(\w+)", re.IGNORECASE)


def statement_table(statement: str) -> str:
    """``<KIND> <first table>`` of one SQL statement (``SELECT rsi_sessions``, ``INSERT rsi_spend``,
    ``SELECT -`` for a table-less select such as ``now()``)."""
    text = statement.lstrip()
    kind = text.split(None, 1)[0].upper() if text else "?"
    if kind == "WITH":  # a CTE: name it by the statement's first data-modifying verb, else SELECT
        found = re.search(r"\b(INSERT|UPDATE|DELETE)\b", text, re.IGNORECASE)
        kind = f"WITH+{found.group(1).upper()}" if found else "WITH"
    m = _TABLE.search(text)
    return f"{kind} {m.group(1) if m else '-'}"


_VARIABLE = re.compile(r"(?<=:)(?:sa_\w+|\d{4}-\d\d-\d\d|[\w.]+(?=:(?:turn|wake|attempt|spent|inbox)\b))")


def redis_command(args: Any) -> str:
    """A Redis command's name; a script's (``EVALSHA``/``EVAL``) with its first key, ids replaced by
    ``*`` (``EVALSHA rsi:tree:*:slots``)."""
    name = str(args[0]).upper()
    if name in ("EVALSHA", "EVAL") and len(args) > 3 and int(args[2]) > 0:
        key = args[3].decode() if isinstance(args[3], bytes) else str(args[3])
        parts = key.split(":")
        if len(parts) > 2 and parts[1] == "tree":
            parts[2] = "*"
        return f"{name} {_VARIABLE.sub('*', ':'.join(parts))}"
    return name


class _Policy:
    """The cluster bench's child at latency 0: ``budget_get``, then ``finding on <topic>``."""

    provider, model = "sim", "sim-1"

    def complete(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]["content"]
        results = [b for b in (last if isinstance(last, list) else []) if b.get("type") == "tool_result"]
        usage = Usage(input_tokens=100, output_tokens=20)
        if not results:
            call = {"type": "tool_use", "id": "b1", "name": "budget_get", "input": {}}
            return ModelResponse(content=[call], usage=usage, stop_reason="tool_use", model="sim-1")
        return ModelResponse(content=[{"type": "text", "text": "finding"}], usage=usage,
                             stop_reason="end_turn", model="sim-1")


@dataclass
class _Frame:
    name: str
    start: float
    inner: float = 0.0


class TurnCounter:
    """Counts one thread's SQL, Redis, JSON and CPU by step while :meth:`counting` (module docstring)."""

    def __init__(self, env: TurnEnv) -> None:
        self.env = env
        self.sql: Counter[str] = Counter()
        self.redis: Counter[str] = Counter()
        self.other: Counter[str] = Counter()
        self.cpu_ms: dict[str, list[float]] = {}
        self._turn_cpu: dict[str, float] = defaultdict(float)
        self._stack: list[_Frame] = []
        self._thread = threading.get_ident()
        self._on = False

    def _mine(self) -> bool:
        return self._on and threading.get_ident() == self._thread

    def _on_execute(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self._mine():
            self.sql[statement_table(statement)] += 1

    def _on_event(self, name: str) -> Callable[..., None]:
        def listener(*_: Any) -> None:
            if self._mine():
                self.other[name] += 1
        return listener

    def _step(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not self._mine():
                return fn(*args, **kwargs)
            frame = _Frame(name, time.thread_time())
            self._stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()
                spent = time.thread_time() - frame.start
                self._turn_cpu[name] += (spent - frame.inner) * 1000
                if self._stack:
                    self._stack[-1].inner += spent
        return wrapped

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Wrap the engine, the Redis client, the JSON serializer and the turn's steps; restore after."""
        env, engine = self.env, self.env.client.engine
        listeners = [("before_cursor_execute", self._on_execute), ("begin", self._on_event("sql_begin")),
                     ("commit", self._on_event("sql_commit")), ("rollback", self._on_event("sql_rollback"))]
        for name, fn in listeners:
            event.listen(engine, name, fn)
        checkout = self._on_event("sql_checkout")
        event.listen(engine.pool, "checkout", checkout)
        client = env.client.redis
        execute: Callable[..., Any] = client.execute_command

        def counted(*args: Any, **options: Any) -> Any:
            if self._mine():
                self.redis[redis_command(args)] += 1
            return execute(*args, **options)

        client.execute_command = counted  # type: ignore[method-assign]
        make_pipeline: Callable[..., Any] = client.pipeline

        def counted_pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = make_pipeline(*args, **kwargs)
            run: Callable[..., Any] = pipe.execute

            def execute_pipe(*a: Any, **k: Any) -> Any:
                if self._mine():
                    self.other["redis_pipelines"] += 1
                    for command_args, _ in pipe.command_stack:
                        self.redis[redis_command(command_args)] += 1
                return run(*a, **k)

            pipe.execute = execute_pipe
            return pipe

        client.pipeline = counted_pipeline  # type: ignore[method-assign]
        wake = env.wake

        def counted_wake(agent: str, session: str) -> None:
            if self._mine():
                self.other["wakes"] += 1
            wake(agent, session)

        env.wake = counted_wake
        patched: list[tuple[Any, str, Any]] = []

        def patch(owner: Any, name: str, new: Any) -> None:
            patched.append((owner, name, getattr(owner, name)))
            setattr(owner, name, new)

        for name in _TURN_STEPS:
            if hasattr(turns, name):
                patch(turns, name, self._step(name, getattr(turns, name)))
        for name in _ATTEMPT_STEPS:
            patch(attempts, name, self._step(f"attempts.{name}", getattr(attempts, name)))
        for name in ("reserve", "settle", "totals"):
            patch(env.budget, name, self._step(f"budget.{name}", getattr(env.budget, name)))
        for name in ("record_turn", "current_harness"):
            patch(env.client, name, self._step(f"client.{name}", getattr(env.client, name)))

        # every json.dumps / json.loads (the engine's serializer, worlds, tool results) ends here
        encode, decode = json.JSONEncoder.encode, json.JSONDecoder.decode

        def counted_encode(this: Any, obj: Any) -> str:
            if self._mine():
                self.other["json_encodes"] += 1
            return encode(this, obj)

        def counted_decode(this: Any, text: str, *a: Any, **k: Any) -> Any:
            if self._mine():
                self.other["json_decodes"] += 1
            return decode(this, text, *a, **k)

        patch(json.JSONEncoder, "encode", counted_encode)
        patch(json.JSONDecoder, "decode", counted_decode)
        self._on = True
        try:
            yield
        finally:
            self._on = False
            for owner, name, old in reversed(patched):
                if owner is env.budget or owner is env.client:
                    delattr(owner, name)
                else:
                    setattr(owner, name, old)
            env.wake = wake
            del client.execute_command
            del client.pipeline
            event.remove(engine.pool, "checkout", checkout)
            for name, fn in listeners:
                event.remove(engine, name, fn)

    @contextmanager
    def turn(self) -> Iterator[None]:
        """One turn: its total CPU goes to ``turn`` and each step's exclusive CPU to its name."""
        self._turn_cpu = defaultdict(float)
        t0 = time.thread_time()
        frame = _Frame("turn", t0)
        self._stack = [frame]
        try:
            yield
        finally:
            total = (time.thread_time() - t0) * 1000
            self._turn_cpu["(turn body)"] += total - frame.inner * 1000
            self._turn_cpu["turn total"] += total
            for k, v in self._turn_cpu.items():
                self.cpu_ms.setdefault(k, []).append(v)
            self._stack = []


def bench_turn_cost(n: int = 50) -> dict[str, Any]:
    """Count ``n`` child turns (module docstring); returns per-turn figures."""
    with private_client("rsi-bench-turncost-") as client:
        return _count(client, n)


def _count(client: RsiClient, n: int, warm: int = 3) -> dict[str, Any]:
    params = RuntimeParams(max_live_children=n + 1, max_spawns_per_turn=n + 1, tree_spawns_per_day=0,
                           tree_turns_per_day=0, tree_tokens_per_day=0, agent_tokens_per_day=0)
    queue: deque[tuple[str, str]] = deque()
    env = TurnEnv(client, params, _Policy(), lambda a, s: queue.append((a, s)))
    with env.factory.begin() as s:
        register(s, "bench", AgentProfile(subagents=CATALOG))
    catalog = {k: SpecEntry(str(v["description"]), (), 4) for k, v in CATALOG.items()}
    caps = resolve_caps(params)
    counter = TurnCounter(env)
    # PostgreSQL: the spawn's cap check on the Redis day counters, as on the cluster; SQLite (tests)
    # sums rsi_spend in the spawn's own transaction (a rebuild would wait on the writer's turn)
    budget = env.budget if client.engine.dialect.name == "postgresql" else None
    # warm: the first turns fill caches (statement compilation, Redis script loads), not counted
    for i in range(n + warm):
        req = SpawnRequest("bench", "main", f"main:{i + 1}", "tu", "worker", f"topic {i}")
        with env.factory.begin() as s:
            row, _ = spawn(s, params, caps, req, catalog, (), budget=budget)
        if i < warm:
            out = run_session_turn(env, row.child_agent, row.id)
        else:
            with counter.counting(), counter.turn():
                out = run_session_turn(env, row.child_agent, row.id)
        if out.outcome != "ran" or out.status != "completed":
            raise RuntimeError(f"the child's turn did not complete: {out}")
        queue.clear()
    sql_total = sum(counter.sql.values())
    return {
        "n": n, "backend": "postgresql", "sim_latency_s": 0,
        "sql_statements": round(sql_total / n, 2),
        "sql_by_table": {k: round(v / n, 2) for k, v in counter.sql.most_common()},
        "sql_transactions": round(counter.other["sql_begin"] / n, 2),
        "sql_commits": round(counter.other["sql_commit"] / n, 2),
        "sql_rollbacks": round(counter.other["sql_rollback"] / n, 2),
        "sql_checkouts": round(counter.other["sql_checkout"] / n, 2),
        "redis_commands": round(sum(counter.redis.values()) / n, 2),
        "redis_by_command": {k: round(v / n, 2) for k, v in counter.redis.most_common()},
        "redis_pipelines": round(counter.other["redis_pipelines"] / n, 2),
        "wakes": round(counter.other["wakes"] / n, 2),
        "json_encodes": round(counter.other["json_encodes"] / n, 2),
        "json_decodes": round(counter.other["json_decodes"] / n, 2),
        "cpu_ms_median": dict(sorted(((k, round(statistics.median(v), 3)) for k, v in counter.cpu_ms.items()),
                                     key=lambda kv: -kv[1])),
    }
