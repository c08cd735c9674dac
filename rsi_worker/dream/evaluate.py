"""The evaluator and the β sweep (docs/dream/evaluation.md).

Episodes are jobs ``(world, β)`` of one policy under a label (``v0``, ``v1``…, ``sweep``);
an :class:`Executor` runs them (inline here, on worker processes or on the cluster), an
:class:`EpisodeStore` keeps every finished one, so an evaluation interrupted anywhere resumes with
the stored episodes and runs only the rest (the results are identical: replay is deterministic).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from rsi_common.math.dream import (
    ReplayEpisode,
    SweepPoint,
    make_normalizer,
    mean_value,
    parallel_penalty,
    pareto_auc_v1,
    pareto_reward,
    replay_value,
)
from rsi_worker.dream.policies import PolicyCode
from rsi_worker.dream.replay import EpisodeResult, Mode, ReplayQuestion, run_episode
from rsi_worker.dream.sandbox import SandboxLimits
from rsi_worker.dream.tree import TreeWorld

__all__ = [
    "BETA_GRID",
    "EpisodeStore",
    "EvalParams",
    "Executor",
    "InlineExecutor",
    "MemoryStore",
    "PoolExecutor",
    "SweepReport",
    "beta_key",
    "evaluate_value",
    "run_job",
    "run_jobs",
    "sweep",
]

BETA_GRID = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass(frozen=True)
class EvalParams:
    """Evaluator defaults (docs/dream/evaluation.md#defaults)."""

    W: int = 4
    beta_cost: float = 0.25 / 110
    beta_par: float | None = None
    """None = 0.05 / W."""
    lam: float = 0.1
    betas: tuple[float, ...] = BETA_GRID
    mode: Mode = "production"
    limits: SandboxLimits = field(default_factory=SandboxLimits)

    @property
    def par(self) -> float:
        return 0.05 / self.W if self.beta_par is None else self.beta_par

    def to_json(self) -> dict[str, Any]:
        return {
            "W": self.W,
            "beta_cost": self.beta_cost,
            "beta_par": self.beta_par,
            "lam": self.lam,
            "betas": list(self.betas),
            "mode": self.mode,
            "limits": {
                "cpu_s": self.limits.cpu_s,
                "memory_bytes": self.limits.memory_bytes,
                "wall_s": self.limits.wall_s,
                "network_namespace": self.limits.network_namespace,
            },
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EvalParams:
        lim = d["limits"]
        return cls(
            int(d["W"]),
            float(d["beta_cost"]),
            None if d["beta_par"] is None else float(d["beta_par"]),
            float(d["lam"]),
            tuple(float(b) for b in d["betas"]),
            d["mode"],
            SandboxLimits(
                int(lim["cpu_s"]),
                int(lim["memory_bytes"]),
                float(lim["wall_s"]),
                bool(lim.get("network_namespace", True)),
            ),
        )


def beta_key(beta: float) -> str:
    """The stored key of a β (6 decimals)."""
    return f"{beta:.6f}"


def run_job(code: PolicyCode, world: TreeWorld, beta: float, params: EvalParams) -> dict[str, Any]:
    """One replay episode → its :class:`EpisodeResult` JSON (a fresh policy session each time)."""
    q = ReplayQuestion(world, mode=params.mode, W=params.W)
    with code.session(params.limits) as s:
        return run_episode(q, s, beta).to_json()


def _run_job_json(args: tuple[dict[str, Any], dict[str, Any], float, dict[str, Any]]) -> dict[str, Any]:
    from rsi_worker.dream.tree import load_world

    code, world, beta, params = args
    return run_job(PolicyCode.from_json(code), load_world(world), beta, EvalParams.from_json(params))


class Executor(Protocol):
    """Runs episode jobs; returns their results in job order."""

    def run(
        self, code: PolicyCode, jobs: Sequence[tuple[TreeWorld, float]], params: EvalParams, label: str = ""
    ) -> list[dict[str, Any]]:
        """Every job's result JSON."""


class InlineExecutor:
    """In this process, one after the other."""

    def run(
        self, code: PolicyCode, jobs: Sequence[tuple[TreeWorld, float]], params: EvalParams, label: str = ""
    ) -> list[dict[str, Any]]:
        return [run_job(code, w, b, params) for w, b in jobs]


class PoolExecutor:
    """On ``workers`` local worker processes (jobs travel as JSON, like cluster tasks)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def run(
        self, code: PolicyCode, jobs: Sequence[tuple[TreeWorld, float]], params: EvalParams, label: str = ""
    ) -> list[dict[str, Any]]:
        args = [(code.to_json(), w.to_json(), b, params.to_json()) for w, b in jobs]
        with ProcessPoolExecutor(self.workers) as pool:
            return list(pool.map(_run_job_json, args))


class EpisodeStore(Protocol):
    """Finished episodes of one cycle, by label."""

    def load(self, label: str) -> dict[tuple[str, str], dict[str, Any]]:
        """``(world_id, beta_key) → result`` already stored."""

    def save(self, label: str, world_id: str, bkey: str, result: dict[str, Any]) -> None:
        """Keep one result (idempotent)."""


class MemoryStore:
    """An :class:`EpisodeStore` in a dict (tests, benches)."""

    def __init__(self) -> None:
        self.data: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}

    def load(self, label: str) -> dict[tuple[str, str], dict[str, Any]]:
        return dict(self.data.get(label, {}))

    def save(self, label: str, world_id: str, bkey: str, result: dict[str, Any]) -> None:
        self.data.setdefault(label, {}).setdefault((world_id, bkey), result)


def run_jobs(
    code: PolicyCode,
    label: str,
    jobs: Sequence[tuple[TreeWorld, float]],
    params: EvalParams,
    executor: Executor,
    store: EpisodeStore | None = None,
    chunk: int = 0,
) -> dict[tuple[str, str], EpisodeResult]:
    """Every job's result, running only those the store lacks; each chunk of ``chunk`` jobs (0 = all)
    is stored as soon as it finishes."""
    done = store.load(label) if store is not None else {}
    todo = [(w, b) for w, b in jobs if (w.world_id, beta_key(b)) not in done]
    step = chunk or max(1, len(todo))
    for i in range(0, len(todo), step):
        part = todo[i : i + step]
        for (w, b), result in zip(part, executor.run(code, part, params, label), strict=True):
            done[(w.world_id, beta_key(b))] = result
            if store is not None:
                store.save(label, w.world_id, beta_key(b), result)
    return {
        (w.world_id, beta_key(b)): EpisodeResult.from_json(done[(w.world_id, beta_key(b))]) for w, b in jobs
    }


def _value(ep: ReplayEpisode, world: TreeWorld, params: EvalParams) -> float:
    norm = make_normalizer(world.recorded_scores, world.baseline, params.mode)
    return replay_value(ep, beta_cost=params.beta_cost, beta_par=params.par, norm=norm)


def _quality(ep: ReplayEpisode, world: TreeWorld) -> float:
    """q = the episode's best s̃ (always normalised: the Pareto points live in [0, 1]²)."""
    norm = make_normalizer(world.recorded_scores, world.baseline, "production")
    return max([norm(world.baseline), *(norm(s) for s in ep.revealed_scores)])


def evaluate_value(
    code: PolicyCode,
    label: str,
    worlds: Sequence[TreeWorld],
    params: EvalParams,
    executor: Executor,
    store: EpisodeStore | None = None,
) -> tuple[float, dict[str, Any]]:
    """V = mean over worlds of ``replay_value`` at the version's baked default β, and its trace
    summary (per world: V, stop reason, N, batches)."""
    if not worlds:
        raise ValueError("evaluate_value: no worlds")
    results = run_jobs(code, label, [(w, code.default_beta) for w in worlds], params, executor, store)
    per_world = {}
    values = []
    for w in worlds:
        r = results[(w.world_id, beta_key(code.default_beta))]
        v = _value(r.episode, w, params)
        values.append(v)
        per_world[w.world_id] = {
            "V": v,
            "stop_reason": r.stop_reason,
            "N": r.episode.n_revealed,
            "batches": r.trace[:12],
            "message": r.message,
        }
    return mean_value(values), per_world


@dataclass(frozen=True)
class SweepReport:
    """Per-world Pareto AUC (mean), parallel penalty, reward and the per-β points."""

    auc: float
    penalty: float
    reward: float
    points: tuple[SweepPoint, ...]
    world_auc: Mapping[str, float]
    stop_reasons: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "auc": self.auc,
            "penalty": self.penalty,
            "reward": self.reward,
            "points": [p.to_json() for p in self.points],
            "world_auc": dict(self.world_auc),
            "stop_reasons": dict(self.stop_reasons),
        }


def sweep(
    code: PolicyCode,
    label: str,
    worlds: Sequence[TreeWorld],
    params: EvalParams,
    executor: Executor,
    store: EpisodeStore | None = None,
    chunk: int = 0,
) -> SweepReport:
    """Every (β, world) episode → the report (docs/dream/evaluation.md#sweep)."""
    jobs = [(w, b) for b in params.betas for w in worlds]
    results = run_jobs(code, label, jobs, params, executor, store, chunk)
    points_by_world: dict[str, list[tuple[float, float]]] = {w.world_id: [] for w in worlds}
    episodes: list[ReplayEpisode] = []
    by_beta: dict[float, list[tuple[float, float, float]]] = {b: [] for b in params.betas}
    reasons: dict[str, int] = {}
    for w, b in jobs:
        ep = results[(w.world_id, beta_key(b))].episode
        episodes.append(ep)
        u = ep.n_revealed / w.n_cells if w.n_cells else 0.0
        q = _quality(ep, w)
        points_by_world[w.world_id].append((min(1.0, u), q))
        by_beta[b].append((q, u, _value(ep, w, params)))
        reasons[ep.stop_reason] = reasons.get(ep.stop_reason, 0) + 1
    auc = pareto_auc_v1(points_by_world)
    penalty = parallel_penalty(episodes)
    points = tuple(
        SweepPoint(
            b,
            math.fsum(x[0] for x in xs) / len(xs),
            math.fsum(x[1] for x in xs) / len(xs),
            math.fsum(x[2] for x in xs) / len(xs),
        )
        for b, xs in by_beta.items()
    )
    world_auc = {wid: pareto_auc_v1({wid: pts}) for wid, pts in points_by_world.items()}
    return SweepReport(auc, penalty, pareto_reward(auc, penalty, params.lam), points, world_auc, reasons)
