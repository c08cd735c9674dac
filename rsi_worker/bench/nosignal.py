"""No-signal consolidation task time (``rsi bench consolidate``, measurement 6).

Most turns carry no signal: their ``consolidate`` task opens the run, loads the agent's state and
world pool, finds nothing new to learn from and writes a ``recorded`` result. This measures that
task's work in-process with the very step functions the task calls — :func:`open_run` then
:func:`finalize` — on the benchmark's real SQLite database and real redis-server.

The agent is a mature one: it first learned from ``rounds`` user corrections (each a real round at
sim latency 0, so its stored state carries edit records, a scoreboard, replay and verdict caches),
then holds a full world pool (``world_pool`` = 60 worlds, one conversation each, every fifth an
accepted answer with ``stars`` 5). One warm-up run marks the signals seen; then each timed run is
preceded (untimed) by a new turn without a signal and its lease (``try_begin``, as the host does),
and timed from the task's start to the end of its final write and lease release. The work is CPU
bound (SQL through the ORM, JSON of 60 worlds and of the state); the slowest runs are the ones a
full garbage collection of the process's heap lands in.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from typing import Any

from rsi_common.db import save_world
from rsi_common.llm import make_client
from rsi_worker.consolidate import open_run
from rsi_worker.consolidate.finalize import finalize
from rsi_worker.jobs.scenario import CORRECTION, conversation_turn, next_history
from rsi_worker.runtime import Runtime

__all__ = ["bench_no_signal"]

AGENT = "quiet"
TOPICS = ("laptops", "phones", "headphones", "monitors", "tablets", "cameras")
CORRECTIONS = (CORRECTION, "Not quite, cite the source as well", "No, keep it brief",
               "Actually, use bullet points instead")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class _Turns:
    """Live sim turns (latency 0) of new single-turn conversations, stored as worlds."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        quick = rt.settings.model_copy(update={"sim": rt.settings.sim.model_copy(update={"latency_ms": 0.0})})
        self.policy = make_client("sim", "sim-1", quick, role="policy")
        self.n = 0
        self.convs: dict[str, tuple[str, int, list[dict[str, Any]]]] = {}

    def add(self, signals: dict[str, Any] | None = None, *, follow_up: tuple[str, str] | None = None) -> str:
        """Store a new conversation's first turn, or (``follow_up = (io, text)``) the next turn of the
        conversation of ``io``; returns the new turn's io id."""
        self.n += 1
        if follow_up is None:
            topic = TOPICS[self.n % len(TOPICS)]
            history: list[dict[str, Any]] = []
            conv, n, text = f"q{self.n}", 1, f"Compare {topic}: use search query={topic}"
        else:
            conv, n, history = self.convs[follow_up[0]]
            n, text = n + 1, follow_up[1]
        turn = conversation_turn(self.policy, None, AGENT, conv, n, text, history,
                                 clock=1_700_000_000.0 + self.n)
        assert turn.world is not None
        io = str(turn.world["io_id"])
        self.convs[io] = (conv, n, next_history(history, text, turn.answer))
        with self.rt.sessions() as s:
            save_world(s, AGENT, turn.world, signals or {}, retention=self.rt.settings.world_retention,
                       enqueued=True)
            s.commit()
        return io


def _one(rt: Runtime, io: str) -> tuple[float, float, str]:
    """One run for ``io``: ``(open_run s, finalize s, status)``."""
    lease = rt.coord.try_begin(AGENT, io)
    if lease is None:
        raise RuntimeError(f"the lease of {AGENT} is held")
    t0 = time.perf_counter()
    nxt = open_run(rt.deps, lease)
    t1 = time.perf_counter()
    if nxt.kind != "final" or nxt.result is None:
        raise RuntimeError(f"a no-signal run went on to {nxt.kind!r}")
    result, rerun = finalize(rt.deps, nxt.ctx, nxt.result)
    t2 = time.perf_counter()
    if rerun is not None:
        raise RuntimeError("a no-signal run asked for a re-run")
    return t1 - t0, t2 - t1, result.status


def _learn(rt: Runtime, turns: _Turns, rounds: int) -> list[str]:
    """``rounds`` corrections, each consolidated in-process at sim latency 0; their statuses."""
    from rsi_worker.consolidate import SerialExecutor, consolidate_inline

    sim = rt.settings.sim.model_copy(update={"latency_ms": 0.0})
    quick = dataclasses.replace(rt.deps, settings=rt.settings.model_copy(update={"sim": sim}))
    statuses: list[str] = []
    for i in range(rounds):
        first = turns.add()
        io = turns.add(follow_up=(first, CORRECTIONS[i % len(CORRECTIONS)]))
        lease = rt.coord.try_begin(AGENT, io)
        if lease is None:
            raise RuntimeError(f"the lease of {AGENT} is held")
        statuses += [r.status for r in consolidate_inline(quick, lease, SerialExecutor())]
    return statuses


def bench_no_signal(rt: Runtime, runs: int = 200, *, rounds: int = 3) -> dict[str, Any]:
    """Time ``runs`` no-signal runs of an agent that learned from ``rounds`` corrections (module docstring).

    Returns:
        ``{runs, median_ms, p99_ms, max_ms, open_median_ms, finalize_median_ms, statuses, reasons,
        worlds, learned, state_bytes}``.
    """
    turns = _Turns(rt)
    learned = _learn(rt, turns, rounds)
    pool = rt.settings.consolidation.world_pool
    for i in range(pool):
        turns.add({"stars": 5} if i % 5 == 0 else None)
    _one(rt, turns.add())  # warm-up: marks the accepted signals seen
    total, opened, final = [], [], []
    statuses: dict[str, int] = {}
    for _ in range(max(1, runs)):
        a, b, status = _one(rt, turns.add())
        opened.append(a * 1000)
        final.append(b * 1000)
        total.append((a + b) * 1000)
        statuses[status] = statuses.get(status, 0) + 1
    return {
        "runs": len(total),
        "median_ms": round(statistics.median(total), 3),
        "p99_ms": round(_pct(total, 0.99), 3),
        "max_ms": round(max(total), 3),
        "open_median_ms": round(statistics.median(opened), 3),
        "finalize_median_ms": round(statistics.median(final), 3),
        "statuses": statuses,
        "reasons": _reasons(rt, len(total)),
        "worlds": pool,
        "learned": learned,
        "state_bytes": _state_bytes(rt),
    }


def _reasons(rt: Runtime, n: int) -> dict[str, int]:
    from rsi_common.db import runs as run_rows

    out: dict[str, int] = {}
    with rt.sessions() as s:
        for row in run_rows(s, AGENT, n):
            out[str(row.reason)] = out.get(str(row.reason), 0) + 1
        s.commit()
    return out


def _state_bytes(rt: Runtime) -> int:
    from rsi_common.db import get_agent

    with rt.sessions() as s:
        state = get_agent(s, AGENT).state
        s.commit()
    return len(json.dumps(state))
