"""The fault report of ``rsi loadtest --chaos`` (docs/operations/chaos.md), read back from SQL and Redis
after the load drained.

* **Recovery time of a fault** (:func:`live_again_s`): the agents that had a ``running`` run when it
  struck are *affected*; an affected agent is consolidating again when the run the fault hit went on
  (not ``interrupted``: 0 s) or when a run of it started after the fault that did not end
  ``interrupted``. The fault's recovery time is the latest of its agents' (0 when it affected none);
  an agent never consolidating again makes the fault *unrecovered*.
* **Decided again** (:func:`recovery_s`): until each affected agent's next decision was written (a
  run not ``interrupted`` finished after the fault) — recovery plus a run's length and queue wait.
* **Double adoptions**: adopted runs of one agent from the same start version beyond the first (two
  runs both replacing one parent; the fenced write must make this 0).
* **Interrupted / re-run**: runs closed ``interrupted``, and of their turns those a later run took
  up again (same io id).
* **Stuck runs**: runs still ``running`` when the report is read (after the drain).
* **Leftover coordination keys**: leases whose fence has no ``running`` run, pending marks, run keys
  (early-stop bounds, slots, cancel flags) of closed runs, and messages still unacked by a dead
  worker (they come back after the visibility timeout and stop at once). Step and join claims expire
  by design and are not counted.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import redis
import sqlalchemy as sa

from rsi_common.db import RunRow, make_engine
from rsi_worker.chaos.faults import Fault
from rsi_worker.jobs.loadtest import stats_ms

__all__ = ["RunFacts", "chaos_report", "chaos_rows", "live_again_s", "read_runs", "recovery_s"]

RunFacts = tuple[str, str, str, float, float | None, str | None, str | None, int | None]
"""``(id, agent, status, started_at, finished_at, io_id, start_version, fence)``, epoch seconds."""


def read_runs(db_url: str, prefix: str) -> list[RunFacts]:
    """The runs of the agents whose id starts with ``prefix``."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            cols = (RunRow.id, RunRow.agent_id, RunRow.status, RunRow.started_at, RunRow.finished_at,
                    RunRow.io_id, RunRow.start_version, RunRow.fence)
            rows = conn.execute(sa.select(*cols).where(RunRow.agent_id.startswith(prefix, autoescape=True)))
            return [(str(i), str(a), str(s), st.timestamp(), f.timestamp() if f else None, io, sv, fe)
                    for i, a, s, st, f, io, sv, fe in rows]
    finally:
        engine.dispose()


def recovery_s(fault: Fault, runs: Sequence[RunFacts]) -> float | None:
    """Seconds until every agent the fault affected made a decision again (module docstring);
    ``None``: an affected agent never did."""
    agents = {agent for _, agent in fault.running}
    worst = 0.0
    for agent in agents:
        done = [f for _, a, status, _, f, _, _, _ in runs if a == agent and f is not None
                and f >= fault.at and status not in ("interrupted", "running")]
        if not done:
            return None
        worst = max(worst, min(done) - fault.at)
    return worst


def live_again_s(fault: Fault, runs: Sequence[RunFacts]) -> float | None:
    """Seconds until every agent the fault affected was consolidating again: its run that was
    running when the fault struck went on (it did not end ``interrupted``: 0), or a run of it that
    started after the fault did not end ``interrupted``. ``None``: an affected agent never was."""
    hit = {run_id for run_id, _ in fault.running}
    worst = 0.0
    for agent in {agent for _, agent in fault.running}:
        mine = [r for r in runs if r[1] == agent and r[2] != "interrupted"]
        if any(r[0] in hit for r in mine):
            continue
        later = [r[3] for r in mine if r[3] >= fault.at]
        if not later:
            return None
        worst = max(worst, min(later) - fault.at)
    return worst


def _leftovers(client: redis.Redis, runs: Sequence[RunFacts]) -> dict[str, int]:
    running = {(a, fe) for _, a, s, _, _, _, _, fe in runs if s == "running"}
    closed = {i for i, _, s, _, _, _, _, _ in runs if s != "running"}
    agents = {a for _, a, _, _, _, _, _, _ in runs}
    leases = pending = run_keys = 0
    for agent in agents:
        raw = client.get(f"rsi:{agent}:lease")
        if raw is not None:
            fence = client.get(f"rsi:{agent}:fence")
            if (agent, int(fence or 0)) not in running:
                leases += 1
        pending += int(bool(client.exists(f"rsi:{agent}:pending")))
    for key in client.scan_iter(match="rsi:run:*", count=1000):
        name = key.decode() if isinstance(key, bytes) else str(key)
        parts = name.split(":")
        if len(parts) >= 4 and parts[3] in ("bound", "slots", "cancel") and parts[2] in closed:
            run_keys += 1
    return {"leases": leases, "pending_marks": pending, "run_keys": run_keys,
            "unacked_messages": int(client.hlen("unacked") or 0)}


def chaos_report(db_url: str, client: redis.Redis, faults: Sequence[Fault], prefix: str,
                 load: dict[str, Any], decisions: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``chaos`` section of the load report (module docstring); ``decisions``: the replay
    comparison of a sample of adopted runs, when it was made."""
    runs = read_runs(db_url, prefix)
    per_fault = []
    for fault in faults:
        rec, live = recovery_s(fault, runs), live_again_s(fault, runs)
        per_fault.append({**fault.to_json(), "recovery_s": None if live is None else round(live, 3),
                          "decided_again_s": None if rec is None else round(rec, 3)})
    recovered = [f["recovery_s"] for f in per_fault if f["recovery_s"] is not None]
    decided = [f["decided_again_s"] for f in per_fault if f["decided_again_s"] is not None]
    adopted = Counter((a, sv) for _, a, s, _, _, _, sv, _ in runs if s == "adopted")
    interrupted = [(a, io, st) for _, a, s, st, _, io, _, _ in runs if s == "interrupted"]
    by_io: dict[tuple[str, str | None], list[float]] = defaultdict(list)
    for _, a, _, st, _, io, _, _ in runs:
        by_io[(a, io)].append(st)
    rerun = sum(1 for a, io, st in interrupted if any(t > st for t in by_io[(a, io)]))
    turns = load.get("turns", {})
    return {
        "faults": per_fault,
        "faults_injected": dict(Counter(f.kind for f in faults if f.error is None)),
        "faults_failed": sum(1 for f in faults if f.error is not None),
        "recovery": {**stats_ms(recovered), "unrecovered": len(per_fault) - len(recovered)},
        "decided_again": {**stats_ms(decided), "never": len(per_fault) - len(decided)},
        "turns_lost_at_host": int(turns.get("failed", 0)),
        "turns_lost_after_recording": int(load.get("lost", {}).get("lost_turns", 0)),
        "double_adoptions": sum(n - 1 for n in adopted.values() if n > 1),
        "runs_interrupted": len(interrupted),
        "runs_rerun": rerun,
        "stuck_runs": sum(1 for r in runs if r[2] == "running"),
        "leftover_keys": _leftovers(client, runs),
        "decisions": decisions or {"checked": 0, "note": "not compared"},
    }


def chaos_rows(section: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``chaos`` section as ``(metric, value)`` rows of the load report's table."""
    rec = section["recovery"]
    left = section["leftover_keys"]
    return [
        ("chaos: faults injected", ", ".join(f"{k} {v}" for k, v in section["faults_injected"].items())
         + (f" ({section['faults_failed']} failed)" if section["faults_failed"] else "")),
        ("chaos: recovery per fault", f"p50 {rec.get('p50_ms', '-')} ms, p99 {rec.get('p99_ms', '-')} ms, "
                                      f"max {rec.get('max_ms', '-')} ms; unrecovered {rec['unrecovered']}"),
        ("chaos: next decision per fault", f"p50 {section['decided_again'].get('p50_ms', '-')} ms, "
                                           f"p99 {section['decided_again'].get('p99_ms', '-')} ms"),
        ("chaos: turns lost at the host", str(section["turns_lost_at_host"])),
        ("chaos: double adoptions", str(section["double_adoptions"])),
        ("chaos: runs interrupted / re-run", f"{section['runs_interrupted']} / {section['runs_rerun']}"),
        ("chaos: stuck runs", str(section["stuck_runs"])),
        ("chaos: leftover keys", ", ".join(f"{k} {v}" for k, v in left.items())),
        ("chaos: decisions replayed", str(section["decisions"])),
    ]
