"""The demo's conversation driven through any host client (``RsiClient`` or ``RsiHttpClient``): a
comparison answered, then corrected in the next message — enough for one adopting consolidation."""

from __future__ import annotations

from typing import Any

from rsi_common.config import Settings
from rsi_common.llm import make_client
from rsi_worker.jobs.scenario import CORRECTION, next_history, turn_plan

FIRST = "Compare laptops: use search query=laptops"


def learn(client: Any, agent: str, conv: str = "c1") -> None:
    """Run the two turns through ``client.run_turn`` (the consolidation runs on the cluster)."""
    policy = make_client("sim", "sim-1", Settings(), role="policy")
    first = client.run_turn(agent, turn_plan(agent, conv, 1, FIRST, []), policy)
    assert first.recorded, first.record_error
    history = next_history([], FIRST, first.answer)
    second = client.run_turn(agent, turn_plan(agent, conv, 2, CORRECTION, history), policy)
    assert second.recorded, second.record_error
