"""A consolidation round whose signal reader, proposer, critic, judge or policy answers with a hostile
reply (docs/algorithm/consolidation.md "Hostile replies"), on SQLite and PostgreSQL with a real
redis-server: the round ends with a recorded decision, its run and trial rows are stored (PostgreSQL
refuses a NaN or a lone surrogate in JSON) and bounded, the lease is released, and the agent's next
signal consolidates again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from rsi_common import db
from rsi_common.config import Settings
from rsi_common.coord import fence_key
from rsi_common.replay import ANSWER_CHARS
from rsi_common.stored import first_problem
from rsi_worker.jobs.scenario import CORRECTION
from tests.adversarial.model_replies import (
    Hostile,
    credential,
    critic_replies,
    judge_replies,
    policy_replies,
    proposer_replies,
    signal_replies,
)
from tests.adversarial.stranding import GOOD, REQUEST, agent_keys, run_keys
from tests.support.pipeline import Stack, models_with

pytestmark = pytest.mark.timeout(300)
A = "shop"
CASES: dict[str, tuple[str, str]] = {
    "signal: a lone surrogate": ("signal", signal_replies()["a lone surrogate"]),
    "signal: a 5 MB criterion": ("signal", signal_replies()["a 5 MB criterion"]),
    "proposer: a lone surrogate in an edit": ("proposer", proposer_replies()["a lone surrogate in an edit"]),
    "proposer: a credential summary": ("proposer", proposer_replies()["a credential summary"]),
    "critic: deep": ("critic", critic_replies()["deep"]),
    "critic: a lone surrogate": ("critic", critic_replies()["a lone surrogate"]),
    "judge: a lone surrogate": ("judge", judge_replies()["a lone surrogate"]),
    "judge: a 5 MB reason": ("judge", judge_replies()["a 5 MB reason"]),
    **{f"policy: {k}": ("policy", v) for k, v in policy_replies().items()},
}


@pytest.fixture
def rclient(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _stack(db_url: str, redis_url: str, role: str, reply: str) -> Stack:
    settings = Settings(database_url=db_url, model_backoff_s=0)
    models = models_with(settings, **{role: lambda inner: Hostile(inner, reply)})
    return Stack(settings, redis_client=redis.Redis.from_url(redis_url), models=models)


def _stored(value: Any, max_chars: int) -> None:
    assert first_problem(value) is None
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    assert len(text) <= max_chars and credential() not in text


@pytest.mark.parametrize("case", list(CASES))
def test_a_round_with_a_hostile_role_reply_is_recorded_and_the_agent_goes_on(
    db_url: str, redis_url: str, rclient: redis.Redis, case: str
) -> None:
    role, reply = CASES[case]
    Hostile.calls = 0
    stack = _stack(db_url, redis_url, role, reply)
    try:
        stack.say(A, "c1", REQUEST)
        result = stack.consolidate(A, stack.say(A, "c1", CORRECTION))
        assert Hostile.calls > 0  # the round did ask the hostile role
        assert result.status in ("adopted", "kept", "recorded"), (result.reason, result.error)
        with stack.sessions() as s:
            (row,) = db.runs(s, A, 10)
            trials = db.replay_rows(s, row.id)
        assert row.status == result.status and row.result is not None
        _stored({"result": row.result, "reason": row.reason, "error": row.error}, 2_000_000)
        assert trials
        for t in trials:
            _stored(t.result, ANSWER_CHARS + 300_000)
        assert agent_keys(rclient, A) == {fence_key(A)} and run_keys(rclient) == set()
        nxt = stack.say(A, "c2", GOOD, signals={"stars": 5})  # the agent's next signal
        assert stack.consolidate(A, nxt).status == "recorded"
        assert agent_keys(rclient, A) == {fence_key(A)}
    finally:
        stack.close()
