"""Per-round timeline of an evolve run on the cluster (``rsi bench evolve --distributed``;
docs/algorithm/evolve.md#measured), from the workers' lines (:mod:`rsi_worker.evolve.timeline`).

A round on the cluster is a sequence of tasks: the step that analyses, drafts and smokes (and defers
its trials), the trials, the step that judges (sent by the join), then the next round's first step.
Per round (the steps whose state ``t`` is the round's, and the trials they deferred):

* ``steps_s``: each step's run (from its claim to its outcome: load, engine work) and ``load_s`` of
  it (the run's reload from SQL, ``phases`` ``load``);
* ``early``: per step, the trials it sent before its batch was sealed (beside its drafts), and
  ``joined_here``: the batches a step found complete at their seal and judged itself;
* ``send_s``: each step's sending of what follows (the trials' messages, the next step);
* ``hops_s``: each wait between one task's end and the next task's start on the round's critical
  path — step → its first trial, the trial that joined → the next step, step → next step;
* ``trials``: their number, the wall from the first start to the last end, and per trial the mean
  ``read`` (lease renewal, memo, the candidate's rows), ``run`` (the model calls), ``save`` (its row);
  ``join``: per lane, the batch's check after its last trial (and, for the last lane, sending the
  step), in seconds.
"""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

__all__ = ["round_timelines"]


def _mean(xs: list[float]) -> float:
    return round(statistics.fmean(xs), 4) if xs else 0.0


def round_timelines(path: Path) -> list[dict[str, Any]]:
    """One entry per round ``t ≥ 0`` seen in ``path`` (module docstring)."""
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    steps = sorted((x for x in lines if x["kind"] == "step"), key=lambda x: x["start"])
    trials = sorted((x for x in lines if x["kind"] == "trial"), key=lambda x: x["start"])
    joins = [x for x in lines if x["kind"] == "join"]
    out = []
    for t in sorted({int(s["t"]) for s in steps if int(s["t"]) >= 0}):
        mine = [s for s in steps if int(s["t"]) == t and s["status"] != "joined already"]
        if not mine:
            continue
        # the round's trials: those that started from its first step to the next round's (a step sends
        # its trials while it still drafts, and may judge them itself)
        nxt = [s for s in steps if s["start"] > mine[-1]["start"] and int(s["t"]) > t]
        first, last = mine[0]["start"], (nxt[0]["start"] if nxt else float("inf"))
        rt = [x for x in trials if first <= x["start"] < last]
        hops: list[float] = []
        for a, b in itertools.pairwise(mine):
            between = [x for x in rt if a["end"] <= x["start"] <= b["start"]]
            if a["status"] == "pending" and between:
                hops.append(min(x["start"] for x in between) - a["ran"])  # the step's send → first trial
                hops.append(b["start"] - max(x["end"] for x in between))  # the join's send → the step
            else:
                hops.append(b["start"] - a["ran"])
        if nxt:
            hops.append(nxt[0]["start"] - mine[-1]["ran"])
        out.append(
            {
                "t": t,
                "steps_s": [round(s["ran"] - s["claimed"], 4) for s in mine],
                "early": [int(s.get("early", 0)) for s in mine],
                "joined_here": sum(int(s.get("joined_here", 0)) for s in mine),
                "load_s": [round(sum(p[2] for p in s.get("phases", []) if p[1] == "load"), 4) for s in mine],
                "send_s": [round(s["end"] - s["ran"], 4) for s in mine],
                "hops_s": [round(h, 4) for h in hops],
                "trials": {
                    "n": len(rt),
                    "wall_s": round(max(x["end"] for x in rt) - min(x["start"] for x in rt), 4)
                    if rt
                    else 0.0,
                    "read_s": _mean([x["read"] - x["start"] for x in rt if "read" in x]),
                    "run_s": _mean([x["ran"] - x["read"] for x in rt if "ran" in x]),
                    "save_s": _mean([x["saved"] - x["ran"] for x in rt if "saved" in x]),
                    "join_s": _mean([x["end"] - x["done"] for x in joins if first <= x["done"] <= last]),
                },
            }
        )
    return out
