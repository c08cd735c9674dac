"""CPU seconds of processes and of the machine, from Linux ``/proc`` (``rsi bench scale``: what the
cluster's processes used over the makespan, docs/performance/consolidation.md#rsi-bench-scale).

Every figure is user + system time; ``0.0`` where ``/proc`` cannot be read (another OS, a process
that exited). A process tree's CPU counts its live processes and its reaped children
(``cutime``/``cstime``), so a worker's pool children are included.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["machine_cpu_s", "process_cpu_s", "tree_cpu_s", "used"]

_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_cpu_s(pid: int, *, children: bool = True) -> float:
    """User + system seconds of ``pid`` (and of its reaped children when ``children``)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    # after the command: state ppid … utime (index 11), stime, cutime, cstime
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / _TICK


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat(int(status.parent.name))
        if fields is not None:
            parents.setdefault(int(fields[1]), []).append(int(status.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += parents.get(p, [])
    return out


def tree_cpu_s(pid: int) -> float:
    """User + system seconds of ``pid`` and every live descendant (each with its reaped children)."""
    return sum(process_cpu_s(p) for p in _descendants(pid))


def machine_cpu_s() -> float:
    """Busy seconds of all the machine's cores since boot (``/proc/stat``: every state but idle and
    iowait), every process of the machine included; ``0.0`` where unreadable."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return 0.0
    values = [int(v) for v in first[1:]]
    busy = sum(values) - values[3] - (values[4] if len(values) > 4 else 0)
    return busy / _TICK


def used(before: Mapping[str, float], after: Mapping[str, float], keys: Iterable[str]) -> dict[str, float]:
    """``after - before`` of each key, rounded to ms."""
    return {k: round(after.get(k, 0.0) - before.get(k, 0.0), 3) for k in keys}
