"""Regression worlds (docs/consolidation/regression.md): lessons are kept, replayed and guarded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi_common.config import ConsolidationParams, Settings
from rsi_common.db import active_regressions, add_regressions, ensure_agent, regressions, rollback_to
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.pipeline import ScriptedProposer, Stack, models_with

BRIEF = "No, keep it brief"
BRIEF_TEXT = "Keep answers brief: no preamble and at most five lines."


@pytest.fixture
def stack(db_url: str) -> Iterator[Stack]:
    s = Stack(Settings(database_url=db_url, model_backoff_s=0))
    yield s
    s.close()


def learn(stack: Stack, conv: str, topic: str, correction: str) -> object:
    stack.say("shop", conv, f"Compare {topic}: use search query={topic}")
    return stack.consolidate("shop", stack.say("shop", conv, correction))


def test_an_adoption_learns_its_fixed_worlds(stack: Stack) -> None:
    result = learn(stack, "c1", "laptops", CORRECTION)
    assert result.status == "adopted"
    with stack.sessions() as s:
        rows = regressions(s, "shop")
    assert len(rows) == 1 and rows[0].version == result.version and rows[0].run_id == result.run_id
    assert "missing-table" in rows[0].lesson and rows[0].checks
    assert result.round["learned"] == [{"world_id": rows[0].world_id, "lesson": rows[0].lesson}]
    again = learn(stack, "c2", "phones", BRIEF)  # the next round replays the lesson
    assert again.round["lessons"] == [
        {
            "world_id": rows[0].world_id,
            "lesson": rows[0].lesson,
            "run_id": result.run_id,
            "version": result.version,
        }
    ]
    assert rows[0].world_id in again.round["worlds"]


def _drop_instructions_proposer(stack: Stack) -> ScriptedProposer:
    """Variant A rewrites the prompt blocks to the new lesson only (it drops the learned ones)."""
    from rsi_common.harness import workspace_of

    old = workspace_of(stack.harness("shop"))["manifest.json"]
    manifest = json.loads(old)
    manifest["components"][0]["params"]["extra_blocks"] = [BRIEF_TEXT]
    new = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    edit = {
        "id": "E1",
        "component": "prompt",
        "hypothesis": "one short instruction is enough",
        "targets_mode": "missing-brief",
        "predicted_affected": [],
        "retroactive_check": "corrective: -",
    }
    script = [
        {"action": "edit_file", "path": "manifest.json", "old": old, "new": new},
        {"action": "done", "summary": "replace the blocks", "edits": [edit]},
        {"action": "abort"},
    ]
    return ScriptedProposer({"A": script}, fallback=stack.deps.models("sim", "sim-1", "proposer"))


def test_a_proposer_that_drops_a_learned_instruction_is_rejected_naming_the_lesson(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0)
    stack = Stack(settings)
    try:
        first = learn(stack, "c1", "laptops", CORRECTION)
        assert first.status == "adopted"
        proposer = _drop_instructions_proposer(stack)
        stack.deps = type(stack.deps)(
            stack.settings, stack.sessions, stack.coord, models_with(settings, proposer=lambda c: proposer)
        )
        result = learn(stack, "c2", "phones", BRIEF)
        a = next(c for c in result.round["candidates"] if c["variant"] == "A")
        assert a["outcome"] == "REJECTED" and a["reason_code"] == "guard", a["detail"]
        assert "regression: fails the lesson 'missing-table" in a["reason"]
        assert f"learned in run {first.run_id}" in a["reason"]
    finally:
        stack.close()


def test_rollback_keeps_the_set_consistent(stack: Stack) -> None:
    v1 = learn(stack, "c1", "laptops", CORRECTION)
    v2 = learn(stack, "c2", "phones", BRIEF)
    assert v1.status == v2.status == "adopted"
    with stack.sessions() as s:
        assert {r.version for r in active_regressions(s, "shop", v2.version)} == {v1.version, v2.version}
        rollback_to(s, "shop", v1.version)
        s.commit()
        assert {r.version for r in active_regressions(s, "shop", v1.version)} == {v1.version}
    after = learn(stack, "c3", "monitors", "Not quite, cite the source as well")
    assert {x["version"] for x in after.round["lessons"]} == {v1.version}  # v2's lesson left with v2
    with stack.sessions() as s:
        assert len(regressions(s, "shop")) >= 2  # nothing deleted: rolling forward brings it back
        assert {r.version for r in active_regressions(s, "shop", v2.version)} == {v1.version, v2.version}


def test_the_bound_drops_the_least_recently_used(engine: object) -> None:
    from rsi_common.db import session_factory, touch_regressions

    sessions = session_factory(engine)  # type: ignore[arg-type]
    entry = {"lesson": "l", "world": {"schema": "rsi-world/1"}, "checks": [{"name": "x", "criterion": "c"}]}
    with sessions.begin() as s:
        ensure_agent(s, "a")
        add_regressions(s, "a", "v1", "r1", [{**entry, "world_id": f"w{i}"} for i in range(3)], bound=3)
    with sessions.begin() as s:
        first = next(r for r in regressions(s, "a") if r.world_id == "w0")
        touch_regressions(s, [first.id])
    with sessions.begin() as s:
        removed = add_regressions(s, "a", "v2", "r2", [{**entry, "world_id": "w9"}], bound=3)
        kept = {r.world_id for r in regressions(s, "a")}
    assert removed == 1 and "w0" in kept and "w9" in kept and len(kept) == 3


def test_no_regression_set_when_disabled(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'rsi.db'}",
        model_backoff_s=0,
        consolidation=ConsolidationParams(regression_worlds=0),
    )
    stack = Stack(settings)
    try:
        assert learn(stack, "c1", "laptops", CORRECTION).status == "adopted"
        with stack.sessions() as s:
            assert regressions(s, "shop") == []
    finally:
        stack.close()
