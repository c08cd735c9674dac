"""Celery's cost per hop on the benchmark's cluster (``rsi bench consolidate``, measurement 7;
docs/performance/consolidation.md#what-bounds-what-is-left).

A hop of a run (a step's chord body, a member, the accumulate task of a candidate's trials) is: a
message published to the Redis broker, taken by a worker thread, run, its result stored in the
Redis result backend. This sends Celery's built-in ``celery.accumulate`` (a no-op: it returns its
argument) ``n`` times, one after the other, through the cluster's ``judge`` queue and waits for each
result: the median round trip is the per-hop overhead with no work in it. Run after the cluster's
other measurements, on the same workers.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from rsi_common.config import Settings
from rsi_common.dispatch import QUEUE_JUDGE
from rsi_worker.bench.ingest import percentile

__all__ = ["bench_hops"]


def bench_hops(settings: Settings, n: int = 50, timeout_s: float = 30.0) -> dict[str, Any]:
    """``{n, median_ms, p90_ms, max_ms}`` of ``n`` sequential no-op task round trips (module docstring)."""
    from rsi_worker.cluster.app import create_app

    app = create_app(settings, name="rsi-bench-hops")
    times: list[float] = []
    try:
        for i in range(max(1, n) + 3):  # three untimed: connections
            t0 = time.perf_counter()
            # the app ignores results by default: this one is waited on
            res = app.send_task("celery.accumulate", args=(i,), queue=QUEUE_JUDGE, ignore_result=False)
            res.get(timeout=timeout_s)  # raises if the task failed
            if i >= 3:
                times.append((time.perf_counter() - t0) * 1000)
    finally:
        app.close()
    return {"n": len(times), "median_ms": round(statistics.median(times), 2),
            "p90_ms": round(percentile(times, 0.9), 2), "max_ms": round(max(times), 2)}
