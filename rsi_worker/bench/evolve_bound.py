"""The capacity-aware lower bound of an evolve round's wall (docs/algorithm/evolve.md#the-rounds-bound).

A round is a graph of **jobs**; a job holds one thread of its **pool** for ``length`` latency units (its
dependent model calls: a digester's calls, a draft's proposer and critic calls, a trial's policy call
then its checks judged in parallel) and starts only after every job it is ``after`` has ended. The pools
are the round's threads: ``digest`` (``digest_parallel``), ``draft`` (``eval_parallel``) and ``trial``
(``eval_parallel × trial_parallel``, shared by every trial of the round); ``main`` is the round's own
thread (the reporter). With ``e(j)`` the earliest start of job j (the longest path of lengths before
it), no schedule that respects the dependencies and the pool sizes ends before

    max( max_j e(j) + length(j),                                         the longest chain
         max_{pool p, τ} τ + Σ{length(j) : j in p, e(j) ≥ τ} / size(p) )  the work that cannot start before τ

(the jobs with ``e(j) ≥ τ`` start at τ or later, and pool p runs at most ``size(p)`` of them at once).
``τ = 0`` gives the plain ``work / slots`` of a pool.

:func:`list_schedule` is the other side: the wall of the same graph run as the engine runs it, with no
overhead at all (a freed thread takes the ready job of the lowest priority, then the one ready first) —
what the round's structure costs, before any overhead.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Job", "earliest_starts", "list_schedule", "lower_bound", "round_jobs", "smoke_first"]


@dataclass(frozen=True)
class Job:
    """One job of a round's graph: ``length`` in latency units, run on one thread of ``pool``."""

    name: str
    length: float
    pool: str
    after: tuple[str, ...] = ()


def earliest_starts(jobs: Sequence[Job]) -> dict[str, float]:
    """``e(j)`` per job: the longest path of lengths before it. Raises ``ValueError`` on an unknown
    dependency, a duplicate name or a cycle."""
    by_name: dict[str, Job] = {}
    for j in jobs:
        if j.name in by_name:
            raise ValueError(f"job {j.name!r}: duplicate name")
        by_name[j.name] = j
    out: dict[str, float] = {}
    visiting: set[str] = set()

    def start(name: str) -> float:
        if name in out:
            return out[name]
        if name not in by_name:
            raise ValueError(f"job {name!r}: unknown dependency")
        if name in visiting:
            raise ValueError(f"job {name!r}: dependency cycle")
        visiting.add(name)
        job = by_name[name]
        out[name] = max((start(d) + by_name[d].length for d in job.after), default=0.0)
        visiting.discard(name)
        return out[name]

    for j in jobs:
        start(j.name)
    return out


def lower_bound(jobs: Sequence[Job], pools: Mapping[str, int]) -> float:
    """The bound of the module docstring, in latency units (0.0 for no job). Raises ``ValueError``
    when a job's pool has no size ≥ 1."""
    if not jobs:
        return 0.0
    e = earliest_starts(jobs)
    best = max(e[j.name] + j.length for j in jobs)
    for pool in {j.pool for j in jobs}:
        size = pools.get(pool, 0)
        if size < 1:
            raise ValueError(f"pool {pool!r}: needs a size >= 1, got {size}")
        mine = [j for j in jobs if j.pool == pool]
        for tau in {e[j.name] for j in mine}:
            work = sum(j.length for j in mine if e[j.name] >= tau)
            best = max(best, tau + work / size)
    return best


def smoke_first(job: Job) -> int:
    """The engine's priority: a smoke trial (it gates its candidate) before any other job."""
    return 0 if job.name.startswith("smoke ") else 1


def list_schedule(
    jobs: Sequence[Job], pools: Mapping[str, int], priority: Callable[[Job], int] = smoke_first
) -> float:
    """The end of a greedy schedule of ``jobs`` (module docstring), in latency units (0.0 for no job)."""
    earliest_starts(jobs)  # refuses unknown dependencies and cycles
    by_name = {j.name: j for j in jobs}
    done: dict[str, float] = {}
    free = {p: pools.get(p, 0) for p in {j.pool for j in jobs}}
    if any(n < 1 for n in free.values()):
        raise ValueError(f"pools: every pool needs a size >= 1, got {free}")
    waiting, now = list(jobs), 0.0
    running: list[tuple[float, str]] = []
    while waiting or running:
        ready = [j for j in waiting if all(d in done for d in j.after)]
        ready.sort(key=lambda j: (priority(j), max((done[d] for d in j.after), default=0.0)))
        for j in ready:
            if free[j.pool] > 0:
                free[j.pool] -= 1
                waiting.remove(j)
                heapq.heappush(running, (now + j.length, j.name))
        now, name = heapq.heappop(running)
        done[name] = now
        free[by_name[name].pool] += 1
    return now


def round_jobs(
    rnd: Mapping[str, Any],
    trials: Mapping[str, int],
    *,
    digester_calls: int,
    heldout_owed: int,
    heldout_after: int,
    trial_chain: int = 2,
) -> list[Job]:
    """The graph of one stored round ``rnd`` (``analysis`` with its ``digests``, ``drafts`` with their
    ``usage`` and ``smoke``), as it ran:

    * the digesters (``digester_calls`` spread evenly over the digests: the mean digester, never longer
      than the longest), then the reporter (one call) after all of them;
    * each draft (its own proposer and critic calls) after the reporter — the proposer reads the report;
    * a smoked draft's ``len(smoke.tasks)`` smoke trials after its draft, then its other trials
      (``trials[variant]`` minus the smoke ones) after every smoke trial — smoke is a gate: a candidate
      that fails it is not measured; a draft without smoke has its trials after the draft;
    * ``heldout_owed`` trials of the previous winner's held-out evaluation, after nothing (beside the
      round), and ``heldout_after`` trials of this round's winner after every draft and trial of the
      round (the judgement; the last round measures its winner before it ends).

    A trial is ``trial_chain`` units (the policy call, then the answer's checks judged in parallel)."""
    jobs: list[Job] = []
    digests = list((rnd.get("analysis") or {}).get("digests") or [])
    gate: tuple[str, ...] = ()
    if digests or digester_calls:
        n = max(1, len(digests))
        names = tuple(f"digest{i}" for i in range(n))
        jobs += [Job(x, digester_calls / n, "digest") for x in names]
        jobs.append(Job("report", 1, "main", names))
        gate = ("report",)
    ends: list[str] = []
    for v, d in sorted((rnd.get("drafts") or {}).items()):
        usage = d.get("usage") or {}
        calls = sum(int((usage.get(r) or {}).get("calls", 0)) for r in ("proposer", "critic"))
        jobs.append(Job(f"draft {v}", calls, "draft", gate))
        before = (f"draft {v}",)
        ends.append(f"draft {v}")
        smoke_n = len((d.get("smoke") or {}).get("tasks") or []) if "smoke" in d else 0
        smokes = tuple(f"smoke {v}{i}" for i in range(smoke_n))
        jobs += [Job(x, trial_chain, "trial", before) for x in smokes]
        rest = max(0, int(trials.get(v, 0)) - smoke_n)
        jobs += [Job(f"trial {v}{i}", trial_chain, "trial", smokes or before) for i in range(rest)]
        ends += [*smokes, *(f"trial {v}{i}" for i in range(rest))]
    jobs += [Job(f"heldout {i}", trial_chain, "trial") for i in range(heldout_owed)]
    ends += [f"heldout {i}" for i in range(heldout_owed)]
    jobs += [Job(f"winner heldout {i}", trial_chain, "trial", tuple(ends)) for i in range(heldout_after)]
    return jobs
