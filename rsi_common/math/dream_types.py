"""Dream-RSI value types (docs/algorithm/formulas.md §2.1, §2.11, docs/algorithm/offline.md §8.2): frozen
dataclasses with ``to_json`` / ``from_json``.

Conventions as in :mod:`rsi_common.math.values`: construction validates (``InvalidInput``, a
``ValueError``), sequences are tuples, ``from_json(to_json(x)) == x``, unknown keys are ignored.
``beta`` is the exploration policy's own knob β ∈ [0, 1] (unrelated to RRSI's β0/β1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rsi_common.errors import InvalidInput
from rsi_common.math import _validate as v

__all__ = [
    "BETA_BRANCHES",
    "BetaDecision",
    "BetaSweep",
    "GridPlan",
    "GridPlanningContext",
    "GridValidity",
    "LiveCycle",
    "ReplayEpisode",
    "SweepPoint",
]

BETA_BRANCHES: tuple[str, ...] = ("default", "keep", "raise", "lower")


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class ReplayEpisode:
    """One replay of one exploration policy at one β on one frozen world.

    ``batch_sizes``: cells per decision batch, in order (0 for the final empty stop batch).
    ``revealed_scores``: scores of the revealed non-root cells (a cell without a score already
    carries the world's floor); ``n_revealed`` = their number N. ``rounds`` = k★, the completed
    decision rounds. ``W`` ≥ 1 = cells per batch allowed; ``N_max`` ≥ 0 = the world's non-root cells.
    ``curve`` = (probes, best-so-far value) points, one per round, starting at ``(0, norm(root))``.
    """

    world_id: str
    beta: float
    batch_sizes: tuple[int, ...]
    revealed_scores: tuple[float, ...]
    root_score: float | None
    n_revealed: int
    rounds: int
    W: int
    N_max: int
    stop_reason: str = ""
    curve: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        v.text("world_id", self.world_id)
        _set(self, "beta", v.unit_interval("beta", self.beta))
        sizes = tuple(v.integer(f"batch_sizes[{i}]", b, 0) for i, b in enumerate(v.sequence("batch_sizes",
                                                                                            self.batch_sizes)))
        scores = tuple(v.finite(f"revealed_scores[{i}]", s)
                       for i, s in enumerate(v.sequence("revealed_scores", self.revealed_scores)))
        _set(self, "batch_sizes", sizes)
        _set(self, "revealed_scores", scores)
        _set(self, "root_score", v.optional_number("root_score", self.root_score))
        v.integer("n_revealed", self.n_revealed, 0)
        if self.n_revealed != len(scores):
            raise InvalidInput(f"n_revealed ({self.n_revealed}) != number of revealed scores ({len(scores)})")
        v.integer("rounds", self.rounds, 0)
        v.integer("W", self.W, 1)
        v.integer("N_max", self.N_max, 0)
        v.text("stop_reason", self.stop_reason)
        curve = []
        for i, point in enumerate(v.sequence("curve", self.curve)):
            pair = v.sequence(f"curve[{i}]", point)
            if len(pair) != 2:
                raise InvalidInput(f"curve[{i}] must be a (probes, value) pair")
            probes = v.non_negative(f"curve[{i}].probes", pair[0])
            curve.append((probes, v.finite(f"curve[{i}].value", pair[1])))
        _set(self, "curve", tuple(curve))

    def to_json(self) -> dict[str, Any]:
        """Keys in field order; ``curve`` as a list of ``[probes, value]``."""
        return {
            "world_id": self.world_id,
            "beta": self.beta,
            "batch_sizes": list(self.batch_sizes),
            "revealed_scores": list(self.revealed_scores),
            "root_score": self.root_score,
            "n_revealed": self.n_revealed,
            "rounds": self.rounds,
            "W": self.W,
            "N_max": self.N_max,
            "stop_reason": self.stop_reason,
            "curve": [list(p) for p in self.curve],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReplayEpisode:
        """Inverse of :meth:`to_json`; ``stop_reason`` and ``curve`` may be absent."""
        d = v.mapping("ReplayEpisode", d)
        what = "ReplayEpisode"
        return cls(
            world_id=v.required(d, "world_id", what),
            beta=v.required(d, "beta", what),
            batch_sizes=tuple(v.sequence("batch_sizes", v.required(d, "batch_sizes", what))),
            revealed_scores=tuple(v.sequence("revealed_scores", v.required(d, "revealed_scores", what))),
            root_score=d.get("root_score"),
            n_revealed=v.required(d, "n_revealed", what),
            rounds=v.required(d, "rounds", what),
            W=v.required(d, "W", what),
            N_max=v.required(d, "N_max", what),
            stop_reason=d.get("stop_reason") or "",
            curve=tuple(v.sequence("curve", d.get("curve") or [])),
        )


@dataclass(frozen=True)
class LiveCycle:
    """One live cycle of a deployed policy: its best score (task scale) at the baked default β."""

    iteration: int
    best_score: float
    beta: float

    def __post_init__(self) -> None:
        v.integer("iteration", self.iteration)
        _set(self, "best_score", v.finite("best_score", self.best_score))
        _set(self, "beta", v.unit_interval("beta", self.beta))

    def to_json(self) -> dict[str, Any]:
        """Keys ``iteration, best_score, beta``."""
        return {"iteration": self.iteration, "best_score": self.best_score, "beta": self.beta}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LiveCycle:
        """Inverse of :meth:`to_json`."""
        d = v.mapping("LiveCycle", d)
        return cls(*(v.required(d, k, "LiveCycle") for k in ("iteration", "best_score", "beta")))


@dataclass(frozen=True)
class SweepPoint:
    """One β of a sweep: mean attainment q, mean work u = N/N_max, mean replay value V."""

    beta: float
    attainment: float
    work: float
    reward: float

    def __post_init__(self) -> None:
        _set(self, "beta", v.unit_interval("beta", self.beta))
        for name in ("attainment", "work", "reward"):
            _set(self, name, v.finite(name, getattr(self, name)))

    def to_json(self) -> dict[str, Any]:
        """Keys ``beta, attainment, work, reward``."""
        return {"beta": self.beta, "attainment": self.attainment, "work": self.work, "reward": self.reward}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SweepPoint:
        """Inverse of :meth:`to_json`."""
        d = v.mapping("SweepPoint", d)
        return cls(*(v.required(d, k, "SweepPoint") for k in ("beta", "attainment", "work", "reward")))


@dataclass(frozen=True)
class BetaSweep:
    """The β sweep of one iteration."""

    iteration: int
    points: tuple[SweepPoint, ...] = ()

    def __post_init__(self) -> None:
        v.integer("iteration", self.iteration)
        points = tuple(v.sequence("points", self.points))
        for i, p in enumerate(points):
            if not isinstance(p, SweepPoint):
                raise InvalidInput(f"points[{i}] must be a SweepPoint, got {type(p).__name__}")
        _set(self, "points", points)

    def to_json(self) -> dict[str, Any]:
        """Keys ``iteration, points``."""
        return {"iteration": self.iteration, "points": [p.to_json() for p in self.points]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BetaSweep:
        """Inverse of :meth:`to_json`."""
        d = v.mapping("BetaSweep", d)
        points = v.sequence("points", d.get("points") or [])
        return cls(v.required(d, "iteration", "BetaSweep"), tuple(SweepPoint.from_json(p) for p in points))


@dataclass(frozen=True)
class BetaDecision:
    """The default β of the next live cycle, the branch taken and why."""

    beta: float
    branch: str
    reason: str = ""

    def __post_init__(self) -> None:
        _set(self, "beta", v.unit_interval("beta", self.beta))
        if self.branch not in BETA_BRANCHES:
            raise InvalidInput(f"branch must be one of {', '.join(BETA_BRANCHES)}, got {self.branch!r}")
        v.text("reason", self.reason)

    def to_json(self) -> dict[str, Any]:
        """Keys ``beta, branch, reason``."""
        return {"beta": self.beta, "branch": self.branch, "reason": self.reason}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BetaDecision:
        """Inverse of :meth:`to_json`."""
        d = v.mapping("BetaDecision", d)
        return cls(v.required(d, "beta", "BetaDecision"), v.required(d, "branch", "BetaDecision"),
                   d.get("reason") or "")


@dataclass(frozen=True)
class GridPlan:
    """A policy's grid plan: B branches × (R + 1) attempts. Any integers; :func:`validate_grid` judges."""

    branch_count: int
    refine_count: int
    reason: str = ""

    def __post_init__(self) -> None:
        v.integer("branch_count", self.branch_count)
        v.integer("refine_count", self.refine_count)
        v.text("reason", self.reason)

    def to_json(self) -> dict[str, Any]:
        """Keys ``branch_count, refine_count, reason``."""
        return {"branch_count": self.branch_count, "refine_count": self.refine_count, "reason": self.reason}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> GridPlan:
        """Inverse of :meth:`to_json`."""
        d = v.mapping("GridPlan", d)
        return cls(v.required(d, "branch_count", "GridPlan"), v.required(d, "refine_count", "GridPlan"),
                   d.get("reason") or "")


@dataclass(frozen=True)
class GridPlanningContext:
    """What a policy's ``plan_grid`` sees: hard caps, the worker cap, fallbacks and, in replay, the
    recorded grid of the world (``None`` = unknown). ``history`` holds earlier plans/outcomes as JSON
    objects (opaque to the formulas)."""

    hard_max_branch_count: int
    hard_max_refine_count: int
    worker_cap: int
    fallback_branch_count: int
    fallback_refine_count: int
    trace_branch_count: int | None = None
    trace_refine_count: int | None = None
    history: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        v.integer("hard_max_branch_count", self.hard_max_branch_count, 0)
        v.integer("hard_max_refine_count", self.hard_max_refine_count, 0)
        v.integer("worker_cap", self.worker_cap, 1)
        v.integer("fallback_branch_count", self.fallback_branch_count, 0)
        v.integer("fallback_refine_count", self.fallback_refine_count, 0)
        v.optional_integer("trace_branch_count", self.trace_branch_count, 0)
        v.optional_integer("trace_refine_count", self.trace_refine_count, 0)
        hist = tuple(v.frozen_map(f"history[{i}]", h)
                     for i, h in enumerate(v.sequence("history", self.history)))
        _set(self, "history", hist)

    def to_json(self) -> dict[str, Any]:
        """Keys in field order."""
        return {
            "hard_max_branch_count": self.hard_max_branch_count,
            "hard_max_refine_count": self.hard_max_refine_count,
            "worker_cap": self.worker_cap,
            "fallback_branch_count": self.fallback_branch_count,
            "fallback_refine_count": self.fallback_refine_count,
            "trace_branch_count": self.trace_branch_count,
            "trace_refine_count": self.trace_refine_count,
            "history": [dict(h) for h in self.history],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> GridPlanningContext:
        """Inverse of :meth:`to_json`; trace counts and history may be absent."""
        d = v.mapping("GridPlanningContext", d)
        what = "GridPlanningContext"
        return cls(
            hard_max_branch_count=v.required(d, "hard_max_branch_count", what),
            hard_max_refine_count=v.required(d, "hard_max_refine_count", what),
            worker_cap=v.required(d, "worker_cap", what),
            fallback_branch_count=v.required(d, "fallback_branch_count", what),
            fallback_refine_count=v.required(d, "fallback_refine_count", what),
            trace_branch_count=d.get("trace_branch_count"),
            trace_refine_count=d.get("trace_refine_count"),
            history=tuple(v.sequence("history", d.get("history") or [])),
        )


@dataclass(frozen=True)
class GridValidity:
    """Result of :func:`validate_grid`; ``reasons`` lists every violation (validity, then support)."""

    valid: bool
    in_support: bool
    cells: int
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.valid, bool) or not isinstance(self.in_support, bool):
            raise InvalidInput("valid and in_support must be booleans")
        v.integer("cells", self.cells, 0)
        _set(self, "reasons", v.strings("reasons", self.reasons))

    @property
    def rewardable(self) -> bool:
        """Valid and in support: only such plans earn replay reward."""
        return self.valid and self.in_support

    def to_json(self) -> dict[str, Any]:
        """Keys ``valid, in_support, cells, reasons, rewardable`` (the last informational)."""
        return {"valid": self.valid, "in_support": self.in_support, "cells": self.cells,
                "reasons": list(self.reasons), "rewardable": self.rewardable}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> GridValidity:
        """Inverse of :meth:`to_json` (``rewardable`` is recomputed)."""
        d = v.mapping("GridValidity", d)
        what = "GridValidity"
        return cls(v.required(d, "valid", what), v.required(d, "in_support", what),
                   v.required(d, "cells", what), tuple(v.sequence("reasons", d.get("reasons") or [])))
