"""``rsi bench stream``: what streaming adds between the model's first chunk and the host's first
event (issue 16; target < 5 ms median with the sim model at zero latency).

The sim policy model (latency 0) is wrapped so that the moment it yields its first text chunk of a
turn is stamped; the host's side stamps the moment it receives the first ``TextDelta``. The
difference is the kernel's added latency, measured two ways, ``n`` turns each:

* **kernel** — ``run_turn(..., on_event=…)``: the chunk goes through the model caller and the
  event callback on the same thread;
* **agent** — ``Agent.stream(…)`` on the embedded default in a temporary directory: the turn runs on
  its own thread and the event crosses the queue to the consuming thread (what a chat host sees).

Also reported: the first event's time from the start of the turn (prompt assembly, the history read
and the harness resolution included), for scale.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rsi_common.agent import Agent, TextDelta
from rsi_common.config import Settings
from rsi_common.kernel import RetryPolicy, TurnEvent, TurnPlan, run_turn
from rsi_common.llm import ModelRequest, ModelResponse
from rsi_common.llm.sim import SimClient
from rsi_common.llm.streaming import ModelChunk, TextChunk

__all__ = ["bench_stream"]

_NO_RETRY = RetryPolicy(retries=0, backoff_s=0.0)
_REQUESTS = (
    "Compare the regions: EU, US, APAC",
    "Give me a one-line recommendation: tea, coffee, water",
    "Summarise the quarter for the board, keep it brief",
)


class _Stamped:
    """The sim, stamping the first text chunk it yields (``perf_counter`` seconds)."""

    provider = "sim"
    model = "sim-1"

    def __init__(self) -> None:
        self.inner = SimClient()
        self.first: float | None = None

    def complete(self, request: ModelRequest) -> ModelResponse:
        return self.inner.complete(request)

    def stream(self, request: ModelRequest) -> Iterator[ModelChunk]:
        for chunk in self.inner.stream(request):
            if self.first is None and isinstance(chunk, TextChunk):
                self.first = time.perf_counter()
            yield chunk


def _summary(values_s: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000.0 for v in values_s)
    p99 = ms[min(len(ms) - 1, math.ceil(0.99 * len(ms)) - 1)]
    return {"median_ms": round(statistics.median(ms), 4), "p99_ms": round(p99, 4), "max_ms": round(ms[-1], 4)}


def _kernel(n: int) -> tuple[list[float], list[float]]:
    added: list[float] = []
    from_start: list[float] = []
    for i in range(n):
        model = _Stamped()
        seen: list[float] = []

        def on_event(event: TurnEvent, seen: list[float] = seen) -> None:
            if not seen and isinstance(event, TextDelta):
                seen.append(time.perf_counter())

        plan = TurnPlan(input=_REQUESTS[i % len(_REQUESTS)], agent_id="bench", io_id=f"io-{i}")
        t0 = time.perf_counter()
        run_turn(plan, None, model, retry=_NO_RETRY, on_event=on_event)
        assert model.first is not None and seen, "the turn streamed no text"
        added.append(seen[0] - model.first)
        from_start.append(seen[0] - t0)
    return added, from_start


def _agent(n: int, home: Path) -> tuple[list[float], list[float]]:
    added: list[float] = []
    from_start: list[float] = []
    settings = Settings(database_url=f"sqlite:///{home / 'rsi.db'}", home=home)
    model = _Stamped()
    with Agent("bench", settings=settings, model_client=model) as agent:
        agent.run("warm up")  # opens the database and the harness cache
        for i in range(n):
            model.first = None
            t0 = time.perf_counter()
            first: float | None = None
            for event in agent.stream(_REQUESTS[i % len(_REQUESTS)], conversation=f"c{i}"):
                if first is None and isinstance(event, TextDelta):
                    first = time.perf_counter()
            assert model.first is not None and first is not None, "the turn streamed no text"
            added.append(first - model.first)
            from_start.append(first - t0)
    return added, from_start


def bench_stream(n: int = 200) -> dict[str, Any]:
    """Run both measurements (module docstring); ``n`` turns each."""
    kernel_added, kernel_start = _kernel(n)
    with tempfile.TemporaryDirectory(prefix="rsi-bench-stream-") as tmp:
        agent_added, agent_start = _agent(n, Path(tmp))
    return {
        "turns": n,
        "kernel_added": _summary(kernel_added),
        "agent_added": _summary(agent_added),
        "kernel_first_event_from_turn_start": _summary(kernel_start),
        "agent_first_event_from_turn_start": _summary(agent_start),
        "target": "median added latency < 5 ms",
        "met": statistics.median(agent_added) < 0.005 and statistics.median(kernel_added) < 0.005,
    }
