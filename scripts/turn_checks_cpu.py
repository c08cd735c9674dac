#!/usr/bin/env python3
"""CPU microseconds per call of ``parse_turn`` and ``finalize_world`` on the ingest benchmark's worlds
(docs/performance/turn-checks.md): ``time.thread_time`` around ``--turns`` calls, repeated
``--rounds`` times; prints the minimum and the median per call as JSON.

    .venv/bin/python scripts/turn_checks_cpu.py                       # this checkout
    /work/main/.venv/bin/python scripts/turn_checks_cpu.py            # another checkout's code

The code measured is the one the interpreter imports (its virtualenv's editable install), so
alternating two interpreters compares two checkouts on the same worlds. Thread CPU time moves less
with the machine's load than wall time, but still by ±10–20 % on a shared machine: compare runs
made one after the other.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import rsi_common.host_input as host_input
import rsi_common.world as world
from rsi_worker.bench.ingest import _turns
from rsi_worker.bench.replay import generate_worlds


def _per_call(turns: list[tuple[str, dict[str, Any]]], fn: Callable[[str, dict[str, Any]], Any],
              rounds: int) -> dict[str, float]:
    values = []
    for _ in range(rounds):
        start = time.thread_time()
        for agent, turn in turns:
            fn(agent, turn)
        values.append((time.thread_time() - start) / len(turns) * 1e6)
    return {"min_us": round(min(values), 1), "median_us": round(statistics.median(values), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    template = [w.data for w in generate_worlds(6)]
    turns = _turns(args.turns, 100, "cpu", template)
    report = {
        "code": world.__file__,
        "parse_turn": _per_call(turns, lambda a, t: host_input.parse_turn(a, t, record_world=True),
                                args.rounds),
        "finalize_world": _per_call(turns, lambda a, t: world.finalize_world(dict(t["world"], agent_id=a)),
                                    args.rounds),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
