"""Evolve runs as the service shows them (docs/service/api.md#evolve-runs): the list rows and one run's
view, read through :class:`rsi_worker.evolve.store.Store`.

Nothing here shows a task's contents: rows carry scores, counts, outcomes and the proposers' edit
summaries; the held-out split appears only as its S per round (its tasks are kept from the roles, and a
viewer token may belong to a process that feeds a suite).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rsi_common.harness import h0, materialize
from rsi_common.harness.diff import diff_trees, workspace_of
from rsi_worker.evolve.store import Store

__all__ = ["frontier_diff", "run_row", "run_view"]


def _iso(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, datetime):
        return v.isoformat()
    return str(v)


def _seconds(lo: Any, hi: Any) -> float | None:
    if isinstance(lo, datetime) and isinstance(hi, datetime):
        return round((hi - lo).total_seconds(), 3)
    return None


def _heldout_of(state: dict[str, Any], version: str) -> float | None:
    """The held-out S measured for ``version`` (``None``: not measured yet, or no held-out split)."""
    found = [h for h in state.get("heldout") or [] if h.get("version") == version]
    return float(found[-1]["S"]) if found and found[-1].get("S") is not None else None


def _version_after(state: dict[str, Any], t: int) -> str:
    """The incumbent's version after round ``t`` (``h0`` before any adoption)."""
    acc = [a for a in state.get("accepted") or [] if int(a.get("t", -1)) <= t]
    return str(acc[-1]["version"]) if acc else "h0"


def run_row(row: dict[str, Any]) -> dict[str, Any]:
    """One list row from a :meth:`Store.runs_page` row: rounds done of T, the frontier's S on the evolve
    split (S_t) and on the held-out split, S★."""
    state = row["state"] or {}
    done = max(0, len(state.get("trajectory") or []) - 1)
    version = _version_after(state, done - 1) if state else "h0"
    return {
        "name": row["name"],
        "suite": row["suite"],
        "status": row["status"],
        "stop_requested": row["stop_requested"],
        "rounds_done": done,
        "T": row["T"],
        "frontier_version": version,
        "S_evolve": state.get("S_t"),
        "S_heldout": _heldout_of(state, version) if state else None,
        "S_star": state.get("S_star"),
        "created_at": _iso(row["created_at"]),
        "updated_at": _iso(row["updated_at"]),
    }


def _calls(usage: dict[str, Any] | None) -> tuple[int, int]:
    u = usage or {}
    calls = sum(int(v.get("calls", 0)) for v in u.values())
    tokens = sum(int(v.get("input_tokens", 0)) + int(v.get("output_tokens", 0)) for v in u.values())
    return calls, tokens


def _candidate(c: dict[str, Any]) -> dict[str, Any]:
    d = c.get("decision") or {}
    ev = c.get("ev") or {}
    return {
        "variant": c.get("variant"),
        "S": d.get("S") if d.get("S") is not None else ev.get("S"),
        "outcome": d.get("outcome") or c.get("gate_failure"),
        "reason": d.get("reason") or c.get("detail"),
        "delta_S": d.get("delta_S"),
        "delta_C": d.get("delta_C"),
        "early_stop": bool(c.get("early_stop")),
        "edits": [
            {"id": e.get("id"), "component": e.get("component"), "hypothesis": e.get("hypothesis")}
            for e in c.get("edits") or []
        ],
    }


def run_view(store: Store, name: str) -> dict[str, Any]:
    """One run: its config, a row per judged round (t, δ, S★ and the incumbent's S before the round, the
    candidates with S and outcome, the winner, S on the evolve and held-out splits after the round, model
    calls and tokens, the span of its trials in seconds), the frontier and the decisions' edits.

    Raises:
        InvalidInput: unknown run.
    """
    suite, config, status, stop_requested, state = store.run(name)
    created, updated = store.run_times(name)
    state = state or {}
    stored = {r["t"]: r for r in store.rounds(name)}
    spans = store.trial_spans(name)
    trajectory = [float(x) for x in state.get("trajectory") or []]
    judged = sorted(t for t, r in stored.items() if t >= 0 and r["decision"] is not None)
    rounds = []
    for t in judged:
        rnd, dec = stored[t], stored[t]["decision"]
        nxt = (stored.get(t + 1) or {}).get("before")  # the usage the next round started with, else now's
        used = _calls((nxt or state).get("usage"))
        before = _calls((rnd["before"] or {}).get("usage"))
        version = _version_after(state, t)
        lo, hi, n = spans.get(t, (None, None, 0))
        rounds.append(
            {
                "t": t,
                "delta": dec.get("delta"),
                "S_star": dec.get("S_star"),
                "incumbent_S": (dec.get("incumbent") or {}).get("S"),
                "candidates": [_candidate(c) for c in dec.get("candidates") or []],
                "winner": dec.get("winner"),
                "adopted": dec.get("winner") is not None,
                "S_evolve": trajectory[t + 1] if t + 1 < len(trajectory) else None,
                "S_heldout": _heldout_of(state, version),
                "version": version,
                "model_calls": max(0, used[0] - before[0]),
                "model_tokens": max(0, used[1] - before[1]),
                "trials": n,
                "trials_wall_s": _seconds(lo, hi),
                "readjudicated": "original" in dec,
            }
        )
    current = max((t for t in stored if t >= 0), default=None)
    in_progress = None
    if status == "running" and current is not None and current not in judged:
        in_progress = {"t": current, "trials": spans.get(current, (None, None, 0))[2]}
    version = str((state.get("incumbent") or {}).get("version") or "h0")
    return {
        "name": name,
        "suite": suite,
        "status": status,
        "stop_requested": stop_requested,
        "T": config.params.T,
        "rounds_done": len(judged),
        "created_at": _iso(created),
        "updated_at": _iso(updated),
        "config": config.to_json(),
        "baseline": {
            "S": trajectory[0] if trajectory else None,
            "S_heldout": _heldout_of(state, "h0"),
            "delta": state.get("delta"),
            "delta_source": state.get("delta_source"),
        },
        "rounds": rounds,
        "in_progress": in_progress,
        "frontier": {
            "version": version,
            "S_evolve": state.get("S_t"),
            "S_heldout": _heldout_of(state, version),
            "S_star": state.get("S_star"),
            "accepted": list(state.get("accepted") or []),
            "trajectory": trajectory,
        },
        "heldout": [{"t": h.get("t"), "version": h.get("version"), "S": h.get("S")}
                    for h in state.get("heldout") or []],
        "usage": state.get("usage") or {},
    }


def frontier_diff(store: Store, name: str) -> str:
    """The unified diff from H0 to the run's frontier harness (``""`` while the frontier is H0)."""
    state = store.run(name)[4] or {}
    payload = state.get("incumbent")
    if not payload:
        return ""
    return diff_trees(workspace_of(h0()), workspace_of(materialize(payload)))
