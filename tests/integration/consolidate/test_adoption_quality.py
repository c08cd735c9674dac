"""Adoption quality (docs/consolidation/estimator.md, docs/security/gate.md): a repeated correction of a
lesson the agent already learned adopts nothing, whatever the noise did to the recorded answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsi_common.config import Settings, SimConfig
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.pipeline import Stack

TOPICS = ("laptops", "phones", "headphones", "monitors", "tablets", "cameras")


def _learned(stack: Stack) -> None:
    for attempt in range(6):  # noise may drop the trait on the correction's own replays: retry
        conv = f"learn{attempt}"
        stack.say("shop", conv, f"Compare {TOPICS[attempt]}: use search query={TOPICS[attempt]}")
        if stack.consolidate("shop", stack.say("shop", conv, CORRECTION)).status == "adopted":
            return
    pytest.fail("the correction was never learned")


@pytest.mark.parametrize("seed", range(6))
def test_a_repeated_correction_adopts_nothing(tmp_path: Path, seed: int) -> None:
    """The issue's case: after the lesson is adopted, the user repeats it on a turn where noise dropped
    the trait. The incumbent is not scored by that failed answer (outcome-selected world: fresh
    replays), and a candidate that restates the instruction is a duplicate: nothing is adopted."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'rsi.db'}",
        model_backoff_s=0,
        sim=SimConfig(noise=0.25, seed=seed),
    )
    stack = Stack(settings)
    try:
        _learned(stack)
        version = stack.current_version("shop")
        repeated = 0
        for n in range(12):
            topic = TOPICS[n % len(TOPICS)]
            turn = stack.say("shop", f"again{n}", f"Compare {topic}: use search query={topic}")
            if "|---" in turn.answer and "Recommendation:" in turn.answer:
                continue  # the harness worked: the user has nothing to repeat
            result = stack.consolidate("shop", stack.say("shop", f"again{n}", CORRECTION))
            repeated += 1
            assert result.status != "adopted", (result.reason, result.round)
            assert stack.current_version("shop") == version
            for cand in (result.round or {}).get("candidates", []):
                assert cand["outcome"] in ("critic_reject", "REJECTED", "LOST", "no_proposal"), cand
        assert repeated > 0, "noise never dropped the trait: the case was not exercised"
    finally:
        stack.close()
