"""Shared helpers of the Dream tests: the toy world of docs/check-vectors.md (Dream toy world)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rsi_common.math.dream import GridPlan, GridPlanningContext
from rsi_worker.dream.tree import Cell, TreeWorld
from rsi_worker.dream.view import PolicyView


def toy_world() -> TreeWorld:
    """Root 0.40; b0 = [0.50, 0.62, 0.60], b1 = [0.30, 0.70], b2 = [0.55]."""
    scores = {(0, 0): 0.50, (0, 1): 0.62, (0, 2): 0.60, (1, 0): 0.30, (1, 1): 0.70, (2, 0): 0.55}
    order = [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (0, 2)]
    cells = [Cell(b, a, seq, scores[(b, a)]) for seq, (b, a) in enumerate(order)]
    return TreeWorld.build("toy", "toy-task", 0.40, cells, (3, 2))


class Scripted:
    """A policy session that plays fixed batches and records every view it was shown."""

    def __init__(self, batches: Sequence[list[str]], plan: GridPlan | None = None) -> None:
        self.batches = list(batches)
        self.plan = plan or GridPlan(3, 2)
        self.views: list[dict[str, object]] = []

    def plan_grid(self, ctx: GridPlanningContext) -> GridPlan:
        return self.plan

    def choose(self, view: PolicyView, beta: float) -> list[str]:
        self.views.append({"revealed": view.revealed(), "legal": view.legal()})
        return self.batches.pop(0) if self.batches else []


@pytest.fixture
def toy() -> TreeWorld:
    return toy_world()
