"""Simulated search tasks for the sim model (docs/dream/sim-tasks.md).

A task is fixed by ``(seed, task_id)``: every branch b has a quality ``q_b`` and a pace ``tau_b``;
attempt a of branch b scores ``baseline + span·q_b·(1 − exp(−(a + 1)/tau_b)) + noise`` (rounded to 4
decimals, the verifier's score) unless it fails (probability ``fail_rate``: ``valid = False``, no
score, a ``fail_class``). Generating an attempt costs ``tokens = 600 + 150·a + jitter`` (refinements
carry more context). Everything is drawn from ``random.Random`` seeded by SHA-256 of the seed and the
task id, so a task reads the same in every process: the replay grid (:func:`generate_world`) and the
live task (:class:`SimSearchTask`) agree cell by cell.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import Protocol

from rsi_worker.dream.tree import Cell, TreeWorld

__all__ = ["CellOutcome", "SearchTask", "SimSearchTask", "SimTaskParams", "generate_world", "generate_worlds"]

FAIL_CLASSES = ("compile_error", "timeout", "wrong_format")


@dataclass(frozen=True)
class SimTaskParams:
    """The shape of generated tasks. ``span`` is the best reachable gain over the baseline."""

    branches: int = 8
    refine: int = 5
    """Attempts per branch − 1 (R)."""
    baseline_lo: float = 0.2
    baseline_hi: float = 0.5
    span: float = 0.5
    noise: float = 0.02
    fail_rate: float = 0.1


@dataclass(frozen=True)
class CellOutcome:
    """What evaluating one attempt returns."""

    score: float | None
    valid: bool
    fail_class: str | None
    error: str | None
    tokens: int


class SearchTask(Protocol):
    """A live search task: the task adapter a user provides (the sim's is :class:`SimSearchTask`)."""

    task_id: str
    baseline: float

    @property
    def grid(self) -> tuple[int, int]:
        """``(branch_count, refine_count)`` the task allows."""

    def evaluate(self, branch: int, attempt: int) -> CellOutcome:
        """Generate and verify one attempt (called once per revealed cell)."""


def _rng(seed: int, task_id: str, label: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}\x00{task_id}\x00{label}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class SimSearchTask:
    """A live search task: attempts are generated on demand (the task adapter of the sim)."""

    def __init__(self, seed: int, task_id: str, params: SimTaskParams | None = None) -> None:
        self.seed, self.task_id = seed, task_id
        self.params = p = params or SimTaskParams()
        top = _rng(seed, task_id, "task")
        self.baseline = round(top.uniform(p.baseline_lo, p.baseline_hi), 4)
        # A few strong branches among many weak ones: quality ~ Beta(0.7, 1.6).
        self._quality = [top.betavariate(0.7, 1.6) for _ in range(p.branches)]
        self._pace = [top.uniform(0.6, 3.0) for _ in range(p.branches)]

    @property
    def grid(self) -> tuple[int, int]:
        """``(branch_count, refine_count)`` the task allows."""
        return self.params.branches, self.params.refine

    def evaluate(self, branch: int, attempt: int) -> CellOutcome:
        """Generate and verify attempt ``attempt`` of ``branch`` (deterministic)."""
        p = self.params
        if not (0 <= branch < p.branches and 0 <= attempt <= p.refine):
            raise IndexError(f"cell b{branch}a{attempt} is outside the task's grid")
        r = _rng(self.seed, self.task_id, f"b{branch}a{attempt}")
        tokens = 600 + 150 * attempt + r.randrange(0, 200)
        if r.random() < p.fail_rate:
            return CellOutcome(
                None,
                False,
                FAIL_CLASSES[r.randrange(len(FAIL_CLASSES))],
                "the verifier rejected the attempt",
                tokens,
            )
        gain = p.span * self._quality[branch] * (1 - math.exp(-(attempt + 1) / self._pace[branch]))
        score = round(self.baseline + gain + r.gauss(0.0, p.noise), 4)
        return CellOutcome(score, True, None, None, tokens)


def generate_world(
    seed: int, task_id: str, params: SimTaskParams | None = None, world_id: str | None = None
) -> TreeWorld:
    """The full recorded grid of a task: branches in order, each explored attempt by attempt."""
    task = SimSearchTask(seed, task_id, params)
    cells: list[Cell] = []
    seq = 0
    # Creation order interleaves branches round by round, as a breadth-first explorer would.
    for a in range(task.params.refine + 1):
        for b in range(task.params.branches):
            out = task.evaluate(b, a)
            cells.append(Cell(b, a, seq, out.score, out.valid, out.fail_class, out.error, out.tokens))
            seq += 1
    return TreeWorld.build(
        world_id or f"{task_id}-grid",
        task_id,
        task.baseline,
        cells,
        task.grid,
        {"origin": "generated", "seed": seed},
    )


def generate_worlds(
    seed: int, n: int, params: SimTaskParams | None = None, prefix: str = "task"
) -> list[TreeWorld]:
    """``n`` generated worlds with task ids ``{prefix}-{i}``."""
    return [generate_world(seed, f"{prefix}-{i}", params) for i in range(n)]
