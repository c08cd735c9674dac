#!/usr/bin/env python3
"""CPU microseconds per call of ``parse_turn`` and ``finalize_world`` on the ingest benchmark's worlds
(docs/performance/turn-checks.md): ``time.thread_time`` around ``--turns`` calls, repeated
``--rounds`` times; prints the minimum and the median per call as JSON.

    .venv/bin/python scripts/turn_checks_cpu.py                       # this checkout
    /work/main/.venv/bin/python scripts/turn_checks_cpu.py            # another checkout's code

The code measured is the one the interpreter imports (its virtualenv's editable install), so
alternating two interpreters compares two checkouts on the same worlds. ``--pure-copy`` also
measures a pure Python copy of the compiled checks (docs/dev/compiled.md) in the same process,
round by round alternately with the imported code (compiled when built). Thread CPU time moves less
with the machine's load than wall time, but still by ±10–20 % on a shared machine: compare runs
made one after the other.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rsi_common.host_input as host_input
import rsi_common.world as world
from rsi_common.compiled import is_compiled
from rsi_worker.bench.ingest import _turns
from rsi_worker.bench.replay import generate_worlds

Call = Callable[[str, dict[str, Any]], Any]


def _per_call(turns: list[tuple[str, dict[str, Any]]], fns: dict[str, Call],
              rounds: int) -> dict[str, dict[str, float]]:
    """Each function over all turns, ``rounds`` times, the functions alternately within a round."""
    values: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.thread_time()
            for agent, turn in turns:
                fn(agent, turn)
            values[name].append((time.thread_time() - start) / len(turns) * 1e6)
    return {name: {"min_us": round(min(v), 1), "median_us": round(statistics.median(v), 1)}
            for name, v in values.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pure-copy", action="store_true",
                        help="also measure a pure Python copy of the compiled checks, alternately")
    args = parser.parse_args()
    template = [w.data for w in generate_worlds(6)]
    turns = _turns(args.turns, 100, "cpu", template)
    parse: dict[str, Call] = {"imported": lambda a, t: host_input.parse_turn(a, t, record_world=True)}
    final: dict[str, Call] = {"imported": lambda a, t: world.finalize_world(dict(t["world"], agent_id=a))}
    if args.pure_copy:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.unit.perf import pure_checks

        pure = pure_checks.load("rsi_common.host_input")
        parse["pure"] = lambda a, t: pure["rsi_common.host_input"].parse_turn(a, t, record_world=True)
        final["pure"] = lambda a, t: pure["rsi_common.world"].finalize_world(dict(t["world"], agent_id=a))
    report = {
        "code": world.__file__,
        "compiled": is_compiled(world),
        "parse_turn": _per_call(turns, parse, args.rounds),
        "finalize_world": _per_call(turns, final, args.rounds),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
