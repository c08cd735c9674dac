"""ReplayQuestion: legal cells, batch rules, stop reasons, the floor, information hiding, and the
Dream toy world of docs/check-vectors.md."""

from __future__ import annotations

import random

import pytest

from rsi_common.math.dream import (
    GridPlan,
    anytime_auc,
    make_normalizer,
    parallel_penalty,
    pareto_auc_v1,
    pareto_reward,
    replay_value,
)
from rsi_worker.dream.policies import builtin
from rsi_worker.dream.replay import PolicyTimeout, ReplayQuestion, run_episode
from rsi_worker.dream.simtasks import generate_world
from rsi_worker.dream.tree import Cell, TreeWorld
from tests.unit.dream.conftest import Scripted

A = [["b0a0"], ["b0a1"], ["b0a2"]]
B = [["b0a0", "b1a0"], ["b0a1", "b1a1"]]


def test_toy_world_check_vector(toy: TreeWorld) -> None:
    ra = run_episode(ReplayQuestion(toy, W=2), Scripted(A), 0.5)
    rb = run_episode(ReplayQuestion(toy, W=2), Scripted(B), 0.5)
    assert ra.stop_reason == rb.stop_reason == "policy_stop"
    ea, eb = ra.episode, rb.episode
    assert (ea.n_revealed, ea.rounds, eb.n_revealed, eb.rounds) == (3, 3, 4, 2)
    assert ea.batch_sizes == (1, 1, 1, 0) and eb.batch_sizes == (2, 2, 0)
    raw = make_normalizer([], 0.4, "paper")
    assert replay_value(ea, beta_cost=0.01, beta_par=0.02, norm=raw) == pytest.approx(0.61, rel=1e-9)
    assert replay_value(eb, beta_cost=0.01, beta_par=0.02, norm=raw) == pytest.approx(0.70, rel=1e-9)
    norm = make_normalizer(toy.recorded_scores, toy.baseline, "production")
    qa, qb = max(map(norm, ea.revealed_scores)), max(map(norm, eb.revealed_scores))
    assert (qa, qb) == (pytest.approx(0.733333, rel=1e-5), 1.0)
    auc = pareto_auc_v1({"toy": [(3 / 6, qa), (4 / 6, qb)]})
    assert auc == pytest.approx(0.455556, rel=1e-5)
    assert parallel_penalty([ea, eb]) == 0.75
    assert pareto_reward(auc, 0.75, 0.1) == pytest.approx(0.380556, rel=1e-5)
    assert anytime_auc(ea.curve, 6) == pytest.approx(0.544444, rel=1e-5)
    assert anytime_auc(eb.curve, 6) == pytest.approx(0.444444, rel=1e-5)
    params = {"beta_cost": 0.25 / 110, "beta_par": 0.05 / 2, "norm": norm}
    assert replay_value(ea, **params) == pytest.approx(0.751515, rel=1e-5)
    assert replay_value(eb, **params) == pytest.approx(1.040909, rel=1e-5)


def test_legal_cells_production_and_paper(toy: TreeWorld) -> None:
    q = ReplayQuestion(toy, W=4)
    assert q.legal_ids() == ["b0a0", "b1a0", "b2a0"]
    q.reveal(["b0a0", "b2a0"])
    assert q.legal_ids() == ["b1a0", "b0a1"]  # b2 has no recorded child: it offers nothing
    p = ReplayQuestion(toy, mode="paper", W=4)
    assert p.legal_ids() == ["r"]
    p.reveal(["r"])
    assert p.legal_ids() == ["r", "b0a1"] and [c.id for c in p.revealed] == ["b0a0"]
    assert p.check_batch(["r", "r"]) is not None
    p.reveal(["r", "b0a1"])
    assert [c.id for c in p.revealed] == ["b0a0", "b1a0", "b0a1"]


@pytest.mark.parametrize(
    ("batch", "why"),
    [
        (["b0a0", "b0a0"], "twice"),
        (["b0a0", "b1a0", "b2a0"], "at most W"),
        (["b0a1"], "not legal"),
        (["zz"], "not legal"),
        ("b0a0", "list of cell ids"),
        ([1], "list of cell ids"),
    ],
)
def test_illegal_batch_stops_with_error_and_keeps_what_was_revealed(
    toy: TreeWorld, batch: object, why: str
) -> None:
    q = ReplayQuestion(toy, W=2)
    r = run_episode(q, Scripted([["b1a0"], batch]), 0.5)  # type: ignore[list-item]
    assert r.stop_reason == "error" and why in r.message
    assert r.episode.n_revealed == 1 and r.episode.revealed_scores == (0.30,)


def test_parent_with_child_and_two_cells_of_a_branch_are_refused(toy: TreeWorld) -> None:
    q = ReplayQuestion(toy, mode="paper", W=3)
    q.reveal(["r"])  # opens b0
    assert "not legal" in (q.check_batch(["b0a1", "b0a2"]) or "")
    assert q.check_batch(["r", "b0a1"]) is None


def test_stop_reasons(toy: TreeWorld) -> None:
    assert run_episode(ReplayQuestion(toy), Scripted([[]]), 0).stop_reason == "policy_stop"
    r = run_episode(ReplayQuestion(toy, K2=2), Scripted([["b0a0"], ["b0a1"], ["b0a2"]]), 0)
    assert r.stop_reason == "K2" and r.episode.rounds == 2
    full = [["b0a0", "b1a0", "b2a0"], ["b0a1", "b1a1"], ["b0a2"]]
    r = run_episode(ReplayQuestion(toy), Scripted(full), 0)
    assert r.stop_reason == "exhausted" and r.episode.n_revealed == 6
    r = run_episode(ReplayQuestion(toy), Scripted(full, GridPlan(4, 2)), 0)
    assert r.stop_reason == "out_of_support" and r.episode.n_revealed == 0
    r = run_episode(ReplayQuestion(toy), Scripted(full, GridPlan(0, 2)), 0)
    assert r.stop_reason == "invalid_plan"

    class Slow(Scripted):
        def choose(self, view, beta):  # type: ignore[no-untyped-def]
            if view.round() == 1:
                raise PolicyTimeout("wall limit")
            return super().choose(view, beta)

    r = run_episode(ReplayQuestion(toy), Slow(full), 0)
    assert r.stop_reason == "timeout" and r.episode.n_revealed == 3

    class Boom(Scripted):
        def choose(self, view, beta):  # type: ignore[no-untyped-def]
            raise ZeroDivisionError("x")

    assert run_episode(ReplayQuestion(toy), Boom(full), 0).stop_reason == "error"


def test_plan_restricts_the_grid(toy: TreeWorld) -> None:
    q = ReplayQuestion(toy)
    q.restrict(GridPlan(2, 0))
    assert q.legal_ids() == ["b0a0", "b1a0"]
    q.reveal(["b0a0", "b1a0"])
    assert q.legal_ids() == []


def test_unscored_cell_counts_the_floor() -> None:
    cells = [Cell(0, 0, 0, 0.5), Cell(1, 0, 1, None, False, "timeout"), Cell(1, 1, 2, 0.2)]
    w = TreeWorld.build("w", "t", 0.4, cells)
    r = run_episode(ReplayQuestion(w), Scripted([["b1a0"]], GridPlan(2, 1)), 0)
    assert w.floor == 0.2 and r.episode.revealed_scores == (0.2,)
    view = Scripted([["b1a0"], []], GridPlan(2, 1))
    run_episode(ReplayQuestion(w), view, 0)
    seen = view.views[1]["revealed"][0]  # type: ignore[index]
    assert seen["score"] is None and seen["evaluated"] is False and seen["fail_class"] == "timeout"


def test_view_hides_everything_but_revealed_and_legal(toy: TreeWorld) -> None:
    s = Scripted([["b0a0"], []])
    run_episode(ReplayQuestion(toy), s, 0)
    second = s.views[1]
    assert [c["id"] for c in second["revealed"]] == ["b0a0"]  # type: ignore[index]
    for c in second["legal"]:  # type: ignore[attr-defined]
        assert c["score"] is None and c["seq"] == -1
        assert set(c) == {"id", "branch", "attempt", "parent", "seq", "score"}
    rev = second["revealed"][0]  # type: ignore[index]
    assert rev["delta_vs_baseline"] == pytest.approx(0.10) and rev["delta_vs_parent"] == pytest.approx(0.10)


@pytest.mark.parametrize("name", ["parallel_refine", "fixed_width"])
def test_permuting_hidden_scores_leaves_decisions_identical(name: str) -> None:
    world = generate_world(5, "hide")
    code = builtin(name)
    with code.session() as s:
        first = run_episode(ReplayQuestion(world), s, 0.6)
    shown = {cid for batch in first.trace for cid in batch}
    hidden = [c for c in world.cells if c.id not in shown]
    assert hidden, "the episode must leave cells unrevealed for the test to mean anything"
    rng = random.Random(0)
    for _ in range(5):
        scores = [c.score for c in hidden]
        rng.shuffle(scores)
        swap = {c.id: s for c, s in zip(hidden, scores, strict=True)}
        cells = [
            Cell(
                c.branch,
                c.attempt,
                c.seq,
                swap.get(c.id, c.score) if c.id in swap else c.score,
                c.valid,
                c.fail_class,
                c.error,
                c.tokens,
            )
            for c in world.cells
        ]
        # keep the normaliser's range: the maximum stays in the world, only its place changes
        other = TreeWorld.build(world.world_id, world.task_id, world.baseline, cells, world.grid)
        with code.session() as s:
            again = run_episode(ReplayQuestion(other), s, 0.6)
        assert again.trace == first.trace and again.stop_reason == first.stop_reason
