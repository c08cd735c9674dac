"""Evaluation by replay (docs/algorithm/consolidation.md §3.6): trial plans, scoring one trial, assembling an
evaluation.

A *trial row* is the stored result of one slot ``(candidate, world_id, trial)``, a plain dict::

    {"candidate", "world_id", "trial", "source": "recorded" | "cached" | "replay",
     "status": "ok" | "missing" | "cancelled", "reward", "weight", "tokens",
     "result": {"replay": <ReplayResult JSON>, "passed": int, "verdicts": [...],
                "new_verdicts": {key: [pass, reason]}}}

The same rows are stored in ``rsi_replays`` by the distributed run and held in memory by tests;
:func:`assemble` turns them into an :class:`~rsi_common.math.EvalResult`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rsi_common.math import (
    EvalResult,
    TaskResult,
    aggregate,
    can_stop_exactly,
    completed_status,
    upper_lower,
)
from rsi_common.replay import ReplayResult
from rsi_worker.consolidate.signals import NO_ISSUE

__all__ = [
    "Assembled",
    "StopContext",
    "TrialSlot",
    "assemble",
    "bound_total",
    "outcome_selected",
    "plan_candidate",
    "plan_incumbent",
    "score",
]

Source = Literal["recorded", "cached", "replay"]
INCUMBENT = "incumbent"


@dataclass(frozen=True)
class TrialSlot:
    """One trial to run: a world under a candidate (``"incumbent"`` or a variant label)."""

    candidate: str
    world_id: str
    trial: int
    source: Source = "replay"
    reuse: Mapping[str, Any] | None = None
    """ReplayResult JSON of a ``recorded`` or ``cached`` trial (re-scored, never re-run)."""

    def key(self) -> tuple[str, str, int]:
        return (self.candidate, self.world_id, self.trial)

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "world_id": self.world_id,
            "trial": self.trial,
            "source": self.source,
            "reuse": dict(self.reuse) if self.reuse is not None else None,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TrialSlot:
        return cls(
            candidate=d["candidate"],
            world_id=d["world_id"],
            trial=int(d["trial"]),
            source=d.get("source", "replay"),
            reuse=d.get("reuse"),
        )


def outcome_selected(signals: Mapping[str, Any]) -> bool:
    """Whether a world's checks come from a reaction to its own recorded answer (docs/consolidation/
    estimator.md): an implicit correction, complaint or acceptance, a rating, a reported issue or a
    comment. Such a world is in W *because of* how that answer went, so the answer is a biased trial."""
    implicit = signals.get("implicit")
    kind = implicit.get("kind") if isinstance(implicit, Mapping) else None
    issue = str(signals.get("issue") or "").strip().lower()
    return (kind in ("correction", "complaint", "accept") or signals.get("stars") is not None
            or issue not in NO_ISSUE or bool(str(signals.get("comment") or "").strip()))


def plan_incumbent(
    worlds: Sequence[Any],
    inc_version: str,
    policy_model: str,
    cached: Mapping[str, Sequence[Mapping[str, Any]]],
    k: int,
) -> list[TrialSlot]:
    """The incumbent's k slots per world: the paired, unbiased estimator (docs/consolidation/estimator.md).

    Slot j is the replay with trial seed j, like every candidate's slot j (common random numbers):

    * a cached replay of ``inc_version`` made with seed j (``trial`` == j) is reused;
    * slot 0 may reuse the recorded turn (same harness version and model, non-blank answer) only
      when the world was **not** selected by its own outcome (:func:`outcome_selected`) — otherwise
      the recorded answer failed (or passed) *because* that is why the world is here;
    * every other slot is a fresh replay.

    Args:
        worlds: the evaluation worlds W (``TurnWorld`` or ``PoolWorld``), in order.
        cached: ``state.cache.get(inc_version, {})``; entries without ``trial`` (older states) are
            taken as trials 0, 1, … in stored order.
    """
    slots: list[TrialSlot] = []
    for w in worlds:
        by_trial: dict[int, tuple[Source, Mapping[str, Any]]] = {}
        for i, r in enumerate(cached.get(w.id, [])):
            by_trial.setdefault(int(r.get("trial", i)), ("cached", dict(r)))
        if (0 not in by_trial and w.harness_version == inc_version and w.model == policy_model
                and not outcome_selected(w.signals) and w.answer.strip()):
            recorded = w.turn() if hasattr(w, "turn") else w  # a lazy PoolWorld or a TurnWorld
            by_trial[0] = ("recorded", ReplayResult.from_recorded(recorded).to_json())
        for j in range(k):
            if j in by_trial:
                slots.append(TrialSlot(INCUMBENT, w.id, j, by_trial[j][0], by_trial[j][1]))
            else:
                slots.append(TrialSlot(INCUMBENT, w.id, j, "replay"))
    return slots


def plan_candidate(variant: str, world_ids: Sequence[str], k: int, *,
                   checks: Mapping[str, Sequence[Any]] | None = None,
                   failing: Collection[str] = (), fresh: Collection[str] = ()) -> list[TrialSlot]:
    """Every slot of a candidate is a fresh replay, in the order that decides the early-stop bound
    soonest (docs/performance/consolidation.md#trial-order): the worlds the incumbent fails first,
    then the fresh ones, then the rest; within each group the heaviest (most checks) first; a
    world's k trials together. Without ``checks`` the order of ``world_ids`` is kept. The order
    changes when trials run, never what is decided (assembled from stored rows per slot)."""
    rank = {w: i for i, w in enumerate(world_ids)}
    fail, new = set(failing), set(fresh)

    def key(w: str) -> tuple[int, int, int]:
        group = 0 if w in fail else 1 if w in new else 2
        weight = len(checks.get(w) or ()) if checks is not None else 0
        return (group if checks is not None else 0, -weight, rank[w])

    return [TrialSlot(variant, w, j, "replay") for w in sorted(world_ids, key=key) for j in range(k)]


JudgeFn = Callable[[str, str, str, "str | None"], "tuple[bool, str]"]


def score(
    checks: Sequence[Mapping[str, Any]], request: str, answer: str, judge: JudgeFn
) -> tuple[float, int, list[dict[str, Any]]]:
    """Judge every check: ``(r = passed / len(checks), w = len(checks), verdicts)``.

    No checks → ``(0, 0, [])``.
    """
    if not checks:
        return 0.0, 0, []
    verdicts: list[dict[str, Any]] = []
    for check in checks:
        ok, reason = judge(request, answer, str(check["criterion"]), check.get("reference"))
        verdicts.append(
            {"name": check["name"], "criterion": check["criterion"], "pass": ok, "reason": reason}
        )
    passed = sum(1 for v in verdicts if v["pass"])
    return passed / len(checks), len(checks), verdicts


@dataclass(frozen=True)
class StopContext:
    """What the early-stop check of a candidate needs (docs/algorithm/formulas.md §2.10,
    docs/algorithm/consolidation.md §3.6.3)."""

    S_star: float
    delta: float
    S_t: float
    phi: float = 0.15
    hopeless_rule: bool = True


@dataclass(frozen=True)
class Assembled:
    """An assembled evaluation: ``ev`` when measured, else ``gate`` with ``detail``."""

    ev: EvalResult | None
    gate: str | None = None
    detail: str = ""
    early_stopped: bool = False
    bounds: tuple[int, int, int] | None = None


def bound_total(world_ids: Sequence[str], checks: Mapping[str, Sequence[Any]], k: int) -> int:
    """``R₀ = Σ_{w∈W} k·|checks[w]|``: the total criterion weight of one candidate's trials."""
    return sum(k * len(checks[w]) for w in world_ids)


def _passed(row: Mapping[str, Any]) -> int:
    result = row.get("result") or {}
    if "passed" in result:
        return int(result["passed"])
    return round(float(row.get("reward") or 0.0) * float(row.get("weight") or 0.0))


def _extra(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    replays = [r for r in rows if r.get("source") == "replay"]
    if rows:

        def answer(r: Mapping[str, Any]) -> str:
            return str(((r.get("result") or {}).get("replay") or {}).get("answer") or "")

        def status(r: Mapping[str, Any]) -> str:
            return str(((r.get("result") or {}).get("replay") or {}).get("status") or "")

        valid = [
            r
            for r in rows
            if r["status"] != "missing" and answer(r).strip() and status(r) in ("completed", "")
        ]
        blank = [r for r in rows if r["status"] == "missing" or not answer(r).strip()]
        extra["valid_rate"] = len(valid) / len(rows)
        extra["no_submission_rate"] = len(blank) / len(rows)
    extra["off_support_calls"] = sum(
        int(((r.get("result") or {}).get("replay") or {}).get("off_support") or 0) for r in rows
    )
    extra["trials_run"] = len(replays)
    read: set[str] = set()
    for r in replays:
        read.update(((r.get("result") or {}).get("replay") or {}).get("params_read") or [])
    extra["params_read"] = sorted(read)
    return extra


def assemble(
    world_ids: Sequence[str],
    checks: Mapping[str, Sequence[Any]],
    rows: Sequence[Mapping[str, Any]],
    k: int,
    job: str,
    stop: StopContext | None = None,
) -> Assembled:
    """Assemble one candidate's (or the incumbent's) evaluation from its trial rows
    (docs/algorithm/consolidation.md §3.6.3).

    Args:
        world_ids: W in order (the ``per_task`` insertion order).
        checks: world id → checks.
        rows: this candidate's trial rows (any order).
        stop: early-stop context for candidates; ``None`` for the incumbent (never stopped,
            validity judged by the caller).
    """
    live = [r for r in rows if r["status"] != "cancelled"]
    stopped = stop is not None and any(r["status"] == "cancelled" for r in rows)
    per_task: dict[str, TaskResult] = {}
    for w in world_ids:
        mine = sorted((r for r in live if r["world_id"] == w), key=lambda r: int(r["trial"]))
        if not mine:
            if stopped:
                continue
            per_task[w] = TaskResult((0.0,), (float(len(checks[w]) or 1),), (None,), missing=1)
            continue
        per_task[w] = TaskResult(
            rewards=tuple(0.0 if r["status"] == "missing" else float(r["reward"]) for r in mine),
            weights=tuple(float(r.get("weight") or len(checks[w])) for r in mine),
            tokens=tuple(r.get("tokens") if r["status"] == "ok" else None for r in mine),
            missing=sum(1 for r in mine if r["status"] == "missing"),
        )
    ev = aggregate(per_task, k, job, _extra(live))
    if stop is None:
        return Assembled(ev)
    ok_rows = [r for r in live if r["status"] == "ok"]
    A = sum(_passed(r) for r in ok_rows)
    B = sum(int(r.get("weight") or 0) for r in ok_rows)
    R = bound_total(world_ids, checks, k) - B
    if stopped:
        if not can_stop_exactly(A, B, R, stop.S_star, stop.delta, stop.S_t):
            return Assembled(None, "eval_invalid", "early stop not confirmed by the stored trials")
        s_max, _ = upper_lower(A, B, R)
        extra = dict(ev.extra)
        extra["early_stopped"] = True
        extra["early_stop"] = {"A": A, "B": B, "R": R, "delta_S": s_max - stop.S_t}
        return Assembled(dataclasses.replace(ev, S=s_max, extra=extra), early_stopped=True, bounds=(A, B, R))
    status = completed_status(
        ev, stop.phi, A, B, R, stop.S_star, stop.delta, stop.S_t, hopeless_rule=stop.hopeless_rule
    )
    if status == "eval_invalid":
        return Assembled(
            None, "eval_invalid", f"{ev.missing}/{ev.n_expected} replays failed", bounds=(A, B, R)
        )
    return Assembled(ev, bounds=(A, B, R))
