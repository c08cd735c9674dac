#!/usr/bin/env python3
"""Client CPU per step of ``RsiClient.record_turn`` inside ``rsi bench ingest`` (SQLite, one thread):
``time.thread_time`` around ``parse_turn``, the record transaction (``retry_write``), the hand-off
(``trigger_consolidation``) and, inside it, ``Coordinator.try_begin`` and ``KombuDispatcher.enqueue``,
summed over the timed turns and printed in microseconds per call beside the benchmark's own figures
(docs/performance/record-path.md#the-lean-evalsha).

    .venv/bin/python scripts/record_turn_steps.py --turns 2000                 # this checkout
    cd /tmp && /work/main/.venv/bin/python /path/to/record_turn_steps.py      # another checkout's code

The code measured is the one the interpreter imports, so alternating two interpreters compares two
checkouts on the same worlds; compare runs made one after the other (thread CPU moves by ±10–20 %
with the load of a shared machine).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import rsi_common.client as client_mod
import rsi_common.coord as coord_mod
import rsi_common.dispatch as dispatch_mod
import rsi_common.handoff as handoff_mod
import rsi_worker.bench.ingest as ingest

_CPU: dict[str, float] = {}


def _timed(owner: Any, name: str, label: str) -> None:
    fn: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _CPU[label] = _CPU.get(label, 0.0) + time.thread_time() - t0

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--agents", type=int, default=100)
    args = parser.parse_args()
    _timed(client_mod.RsiClient, "record_turn", "record_turn")
    _timed(client_mod, "parse_turn", "parse_turn")
    _timed(client_mod, "retry_write", "transaction")
    _timed(client_mod, "trigger_consolidation", "hand_off")
    if hasattr(handoff_mod, "wire_try_begin"):  # rec7: try_begin on the coordinator's wire
        _timed(handoff_mod, "wire_try_begin", "try_begin")
    else:
        _timed(coord_mod.Coordinator, "try_begin", "try_begin")
    _timed(dispatch_mod.KombuDispatcher, "enqueue", "publish")
    record_all = ingest._record_all

    def timed_only(client: Any, turns: Any, threads: int, counter: Any = None) -> Any:
        if counter is not None:  # the timed region: drop the warm-up's sums
            _CPU.clear()
        return record_all(client, turns, threads, counter)

    ingest._record_all = timed_only
    report = ingest.bench_ingest(None, None, args.turns, args.agents, backend="sqlite", threads=1)
    keys = ("turns_per_s", "p50_ms", "p99_ms", "client_cpu_ms_per_call", "client_cpu_share", "outcomes")
    print(json.dumps({"code": client_mod.__file__, **{k: report[k] for k in keys},
                      "cpu_us_per_call": {k: round(v / args.turns * 1e6) for k, v in _CPU.items()}}))


if __name__ == "__main__":
    main()
