"""The phases of a round that overlap (docs/algorithm/evolve.md#the-loop): the winner's held-out evaluation
runs beside the next round, and its figure is stored with that round's state."""

from __future__ import annotations

from typing import Any

from rsi_worker.evolve.engine import run_inline


def test_the_held_out_figure_of_a_winner_arrives_with_the_next_round_or_the_end(stack: Any) -> None:
    name = stack.create("r", params={"T": 2})
    assert run_inline(stack.env, name, max_rounds=1).status == "stopped"
    state = stack.store.run(name)[4]
    assert state["accepted"] and state["heldout_pending"]["t"] == 0  # owed, not measured yet
    assert [h["t"] for h in state["heldout"]] == [-1]
    round1 = [p for t, p, _ in stack.env.phases if t == 1]
    assert run_inline(stack.env, name).status == "done"
    state = stack.store.run(name)[4]
    assert "heldout_pending" not in state
    assert [h["t"] for h in state["heldout"]] == [-1, 0] and state["heldout"][1]["S"] == 1.0
    assert not round1 and any(p.startswith("heldout") for t, p, _ in stack.env.phases if t == 1)
