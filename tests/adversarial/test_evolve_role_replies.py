"""An offline evolve run whose trial policy or criteria judge answers with a hostile reply
(docs/algorithm/consolidation.md "Hostile replies"), on SQLite and PostgreSQL: the run ends ``done``
with storable, bounded trial rows and rounds, and a second run on the same database runs too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rsi_common.llm import ModelClient
from rsi_common.replay import ANSWER_CHARS
from rsi_common.stored import first_problem
from rsi_worker.evolve.engine import run_inline
from tests.adversarial.model_replies import Hostile, credential, judge_replies, policy_replies
from tests.unit.evolve.conftest import EvolveStack

pytestmark = pytest.mark.timeout(300)
CASES: dict[str, tuple[str, str]] = {
    **{f"policy: {k}": ("policy", v) for k, v in policy_replies().items()},
    "judge: a lone surrogate": ("judge", judge_replies()["a lone surrogate"]),
    "judge: a credential": ("judge", judge_replies()["a credential"]),
    "judge: deep": ("judge", judge_replies()["deep"]),
}


def _stored(value: Any, max_chars: int) -> None:
    assert first_problem(value) is None
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    assert len(text) <= max_chars and credential() not in text


@pytest.mark.parametrize("case", list(CASES))
def test_an_evolve_run_with_a_hostile_policy_or_judge_ends_with_storable_trials(
    db_url: str, tmp_path: Path, case: str
) -> None:
    role, reply = CASES[case]

    def wrap(r: str, client: ModelClient) -> ModelClient:
        return Hostile(client, reply) if r == role else client

    Hostile.calls = 0
    stack = EvolveStack(tmp_path, wrap=wrap, url=db_url)
    try:
        name = stack.create("r", params={"T": 1})
        outcome = run_inline(stack.env, name)
        assert Hostile.calls > 0 and outcome.status == "done", outcome
        trials = stack.store.trials(name)
        assert trials
        for t in trials:
            _stored(t, ANSWER_CHARS + 300_000)
        _stored(stack.store.rounds(name), 2_000_000)
        again = stack.create("r2", params={"T": 1})  # the database still takes a run
        assert run_inline(stack.env, again).status == "done"
    finally:
        stack.engine.dispose()
