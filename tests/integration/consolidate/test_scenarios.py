"""Turn consolidation end to end on the sim model (docs/check-vectors.md §9.12, issue 6 acceptance list)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsi_common.config import ConsolidationParams, Settings, SimConfig
from rsi_common.db import rollback_to
from rsi_common.harness import H0_VERSION
from rsi_common.llm import make_client
from rsi_worker.consolidate import ConsolidationState
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.factories import HOPELESS_BLOCK, MARKER
from tests.support.pipeline import ScriptedProposer, Stack, done_action, edit_action, models_with

REQUEST = "Compare laptops: use search query=laptops"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0))
    yield s
    s.close()


def corrected(stack: Stack, agent: str = "shop", conv: str = "c1") -> Any:
    """A turn and the user's correction in the next message; returns the correction turn."""
    stack.say(agent, conv, REQUEST)
    return stack.say(agent, conv, CORRECTION)


def test_correction_is_adopted(db_url: str) -> None:
    stack = Stack(Settings(database_url=db_url, model_backoff_s=0))
    try:
        first = stack.say("shop", "c1", REQUEST)
        result = stack.consolidate("shop", stack.say("shop", "c1", CORRECTION))
        assert result.status == "adopted", result.reason
        rnd = result.round
        assert rnd["incumbent"]["S"] == 0.0 and rnd["delta"] == 0.5
        winner = next(c for c in rnd["candidates"] if c["outcome"] == "ACCEPTED")
        assert winner["S"] == 1.0 and "prompt" in winner["components"]
        state = stack.state("shop")
        assert state.t == 1 and state.progress == [0.0, 1.0]
        accepted = [r for r in state.records if r["outcome"] == "ACCEPTED"]
        assert accepted and {r["component"] for r in accepted} == {"prompt"}
        assert stack.current_version("shop") == result.version != H0_VERSION
        wid = stack.world_id("shop", first)
        assert len(state.cache[result.version][wid]) == 2  # the adopted version's replays are cached
        # the next live turn uses the adopted harness and follows the learned instruction
        again = stack.say("shop", "c2", "Compare phones: use search query=phones")
        assert "|---" in again.answer and again.world["harness_version"] == result.version
    finally:
        stack.close()


def test_adopted_replays_are_reused_next_run(stack: Stack) -> None:
    first = stack.say("shop", "c1", REQUEST)
    stack.say("shop", "c1", CORRECTION)
    assert stack.consolidate("shop").status == "adopted"
    # a new correction elsewhere; the first world (still negative) is in W again, and the
    # incumbent (the adopted version) trials on it come from the cache instead of new replays
    stack.say("shop", "c1", "Not quite, cite the source as well")
    result = stack.consolidate("shop")
    assert result.round["incumbent"]["n_expected"] >= 2
    wid = stack.world_id("shop", first)
    with stack.sessions() as s:
        from rsi_common.db import replay_rows

        rows = replay_rows(s, result.run_id or "", "incumbent")
        sources = {r.source for r in rows if r.world_id == wid}
    assert sources == {"cached"}


def test_same_signals_again_are_recorded(stack: Stack) -> None:
    corrected(stack)
    assert stack.consolidate("shop").status == "adopted"
    again = stack.consolidate("shop")
    assert again.status == "recorded" and again.reason == "no new correction or problem to fix"
    assert stack.state("shop").t == 1


def test_neutral_next_message_is_recorded(stack: Stack) -> None:
    stack.say("shop", "c1", REQUEST)
    stack.say("shop", "c1", "What about phones: use search query=phones")
    result = stack.consolidate("shop")
    assert result.status == "recorded"
    assert stack.state("shop").t == 0


def test_no_worlds_and_first_turn_are_recorded(stack: Stack) -> None:
    turn = stack.say("shop", "c1", REQUEST)
    result = stack.consolidate("shop", turn)
    assert (result.status, result.reason) == ("recorded", "no turn has a signal to learn from yet")


def leaky_stack(tmp_path: Path, **models: Any) -> Stack:
    """No repair round: a leaky draft stays rejected (with repairs the sim proposer drops the pasted
    text the gate quoted and the draft goes on; tests/adversarial/test_user_text.py covers that)."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0,
                        consolidation=ConsolidationParams(repair_rounds=0))
    return Stack(settings, models=models_with(settings, **models))


def test_both_leaky_drafts_are_rejected_and_kept(tmp_path: Path) -> None:
    leaky = Settings(sim=SimConfig(leaky=True))
    stack = leaky_stack(tmp_path, proposer=lambda c: make_client("sim", "sim-1", leaky, role="proposer"))
    corrected(stack)
    result = stack.consolidate("shop")
    assert result.status == "kept"
    assert [c["outcome"] for c in result.round["candidates"]] == ["critic_reject", "critic_reject"]
    state = stack.state("shop")
    assert state.t == 1 and state.progress == [0.0, 0.0]
    assert all(r["delta_S"] is None for r in state.records)
    stack.close()


def test_one_leaky_draft_is_rejected_the_other_adopted(tmp_path: Path) -> None:
    leaky = make_client("sim", "sim-1", Settings(sim=SimConfig(leaky=True)), role="proposer")

    def only_a_leaks(client: Any) -> Any:
        return _VariantSwitch({"A": leaky}, client)

    stack = leaky_stack(tmp_path, proposer=only_a_leaks)
    corrected(stack)
    result = stack.consolidate("shop")
    outcomes = {c["variant"]: c["outcome"] for c in result.round["candidates"]}
    assert outcomes == {"A": "critic_reject", "B": "ACCEPTED"} and result.status == "adopted"
    stack.close()


class _VariantSwitch:
    """Routes a proposer conversation to another client by its variant label."""

    provider, model = "sim", "sim-1"

    def __init__(self, by_variant: dict[str, Any], default: Any) -> None:
        self.by_variant, self.default = by_variant, default

    def complete(self, request: Any) -> Any:
        first = str(request.messages[0]["content"]) if request.messages else ""
        for v, client in self.by_variant.items():
            if f"You draft variant {v} " in first:
                return client.complete(request)
        return self.default.complete(request)


def test_already_passing_is_kept_without_a_round(stack: Stack) -> None:
    corrected(stack)
    assert stack.consolidate("shop").status == "adopted"
    stack.say("shop", "c3", "Compare headphones: use search query=headphones")
    stack.say("shop", "c3", CORRECTION)  # the adopted harness already does this
    result = stack.consolidate("shop")
    assert (result.status, result.reason) == (
        "kept", "the current harness already meets every criterion on these turns")
    assert stack.state("shop").t == 1


def test_unreplayable_incumbent_fails_and_leaves_state(tmp_path: Path) -> None:
    broken = Settings(sim=SimConfig(error_rate=1.0))
    stack = leaky_stack(tmp_path, policy=lambda c: make_client("sim", "sim-1", broken, role="policy"))
    corrected(stack)
    before = stack.state("shop").to_json()
    result = stack.consolidate("shop")
    assert result.status == "failed" and "could not be replayed" in result.reason
    after = stack.state("shop").to_json()
    assert after["t"] == before["t"] and after["records"] == before["records"]
    assert after["seen"] == before["seen"]  # the correction stays fresh
    stack.close()


def test_locked_field_edit_is_rejected_before_replay(tmp_path: Path) -> None:
    script = [edit_action('"locked": [', '"locked": [\n    "none",'), done_action("config", "unlock")]
    stack = leaky_stack(tmp_path, proposer=lambda c: ScriptedProposer({"A": script, "B": script}, c))
    corrected(stack)
    result = stack.consolidate("shop")
    assert result.status == "kept"
    for cand in result.round["candidates"]:
        assert cand["outcome"] in ("critic_reject", "no_proposal")
        assert cand["early_stopped"] is False and cand["S"] is None
    with stack.sessions() as s:
        from rsi_common.db import replay_rows

        assert [r for r in replay_rows(s, result.run_id or "") if r.candidate != "incumbent"] == []
    stack.close()


def test_edit_of_a_param_never_read_is_a_guard_rejection(tmp_path: Path) -> None:
    script = [edit_action('"archive": true', '"archive": false'),
              done_action("memory", "stop archiving", addresses=["memory.archive.params.archive"])]
    stack = leaky_stack(tmp_path, proposer=lambda c: ScriptedProposer({"A": script}, c))
    corrected(stack)
    result = stack.consolidate("shop")
    cand = next(c for c in result.round["candidates"] if c["variant"] == "A")
    assert cand["outcome"] == "REJECTED" and cand["reason_code"] == "guard"
    assert "memory.archive.params.archive" in cand["reason"]
    stack.close()


def test_rollback_during_the_run_wins(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    corrected(stack)
    assert stack.consolidate("shop").status == "adopted"
    stack.say("shop", "c1", "Not quite, cite the source as well")
    before = stack.state("shop").to_json()
    from rsi_worker.consolidate import flow

    original = flow.STEPS["judge_round"]

    def judge_after_rollback(deps: Any, ctx: Any) -> Any:
        with stack.sessions() as s:  # the user rolls back to H0 while the run is judging
            rollback_to(s, "shop", None)
            s.commit()
        return original(deps, ctx)

    monkeypatch.setitem(flow.STEPS, "judge_round", judge_after_rollback)
    result = stack.consolidate("shop")
    assert (result.status, result.reason) == ("kept", "the harness changed during the run; not adopted")
    assert stack.current_version("shop") is None
    assert stack.state("shop").to_json() == before  # the round is discarded; signals stay fresh


def test_state_round_trips(stack: Stack) -> None:
    corrected(stack)
    stack.consolidate("shop")
    state = stack.state("shop")
    assert ConsolidationState.from_json(state.to_json()).to_json() == state.to_json()


HOPELESS_SKILL = [
    {"action": "write_file", "path": "skills/style/SKILL.md",
     "content": f"---\nname: style\ndescription: The {MARKER} answer procedure.\n---\nUse it.\n"},
    edit_action('"components": [', '"components": [\n    {"id": "skills.library", "kind": "skill", '
                '"impl": "rsi_common.kernel.components.skills:SkillLibraryComponent", '
                '"files": ["skills/style/SKILL.md"]},'),
    done_action("skill", "a style procedure"),
]


def early_stop_stack(tmp_path: Path, early_stop: bool) -> tuple[Stack, list[Any]]:
    from rsi_common.config import ConsolidationParams
    from tests.support.pipeline import MarkerPolicy

    settings = Settings(database_url=f"sqlite:///{tmp_path / f'rsi-{early_stop}.db'}", model_backoff_s=0,
                        consolidation=ConsolidationParams(early_stop=early_stop))
    policies: list[MarkerPolicy] = []

    def marker(c: Any) -> Any:
        policies.append(MarkerPolicy(c, MARKER))
        return policies[-1]

    models = models_with(settings, policy=marker,
                         proposer=lambda c: ScriptedProposer({"B": HOPELESS_BLOCK}, c))
    stack = Stack(settings, models=models)
    for i in range(6):  # six turns the user accepted, then two corrected ones
        stack.say("shop", f"ok{i}", "Compare headphones: use search query=headphones", signals={"stars": 5})
    for i in range(2):
        stack.say("shop", f"bad{i}", REQUEST)
        stack.say("shop", f"bad{i}", CORRECTION)
    return stack, policies


def summary_of(stack: Stack, result: Any) -> dict[str, Any]:
    from rsi_common.math import EditRecord, accepted_counts, prune_set, tried

    state = stack.state("shop")
    records = [EditRecord.from_json(r) for r in state.records]
    return {
        "winner": result.round["winner"], "S_star": result.round["S_star"], "status": result.status,
        "tried": sorted(tried(records)), "prune": [p.component for p in prune_set(records, state.t, 4)],
        "counts": accepted_counts(records), "outcomes": [c["outcome"] for c in result.round["candidates"]],
        "codes": [c["reason_code"] for c in result.round["candidates"]],
    }


def test_hopeless_candidate_stops_early_and_decides_the_same(tmp_path: Path) -> None:
    fast, fast_policy = early_stop_stack(tmp_path, early_stop=True)
    stopped = fast.consolidate("shop")
    full, full_policy = early_stop_stack(tmp_path, early_stop=False)
    complete = full.consolidate("shop")
    assert stopped.round["S_star"] == 0.75 and stopped.round["delta"] == 0.0625
    b_fast = next(c for c in stopped.round["candidates"] if c["variant"] == "B")
    b_full = next(c for c in complete.round["candidates"] if c["variant"] == "B")
    assert b_fast["early_stopped"] is True and b_full["early_stopped"] is False
    assert b_fast["trials_run"] < b_full["trials_run"] == 16
    assert b_fast["delta_S"] < 0 and b_fast["delta_S"] >= b_full["delta_S"]  # an upper bound
    assert sum(p.calls for p in fast_policy) < sum(p.calls for p in full_policy)
    assert summary_of(fast, stopped) == summary_of(full, complete)
    assert stopped.status == "adopted" and stopped.round["winner"] == "A"
    fast.close()
    full.close()


def test_stall_makes_the_reserved_variant_explore(tmp_path: Path) -> None:
    from tests.support.pipeline import MarkerPolicy

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0)
    scripted = {"on": True}

    def proposer(c: Any) -> Any:
        return ScriptedProposer({"A": HOPELESS_BLOCK, "B": HOPELESS_SKILL} if scripted["on"] else {}, c)

    long_answer = "I cannot help with that. " * 200  # costlier and wrong: rejected, measured
    stack = Stack(settings, models=models_with(
        settings, policy=lambda c: MarkerPolicy(c, MARKER, long_answer), proposer=proposer))
    for r in range(3):
        stack.say("shop", f"c{r}", REQUEST)
        stack.say("shop", f"c{r}", CORRECTION)
        result = stack.consolidate("shop")
        assert result.status == "kept" and result.round["sigma"] == 0
    state = stack.state("shop")
    assert state.t == 3 and state.progress == [0.0, 0.0, 0.0, 0.0]
    scripted["on"] = False
    stack.say("shop", "c3", REQUEST)
    stack.say("shop", "c3", CORRECTION)
    result = stack.consolidate("shop")
    assert result.round["sigma"] == 1
    with stack.sessions() as s:
        from rsi_common.db import get_run

        drafts = get_run(s, result.run_id or "").drafts
    untried = {"control_flow", "config", "output_plumbing", "context_mgmt", "client_tool", "memory"}
    b_kinds = {t["kind"] for t in drafts["B"]["touched"]}
    assert b_kinds & untried, drafts["B"]
    stack.close()


def test_freeze_during_the_run_blocks_the_adoption(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    from rsi_common.db import freeze
    from rsi_worker.consolidate import flow

    corrected(stack)
    before = stack.state("shop").to_json()
    original = flow.STEPS["judge_round"]

    def judge_after_freeze(deps: Any, ctx: Any) -> Any:
        with stack.sessions() as s:  # the user freezes the agent while the run is judging
            freeze(s, "shop")
            s.commit()
        return original(deps, ctx)

    monkeypatch.setitem(flow.STEPS, "judge_round", judge_after_freeze)
    result = stack.consolidate("shop")
    assert (result.status, result.reason) == ("kept", "the agent was frozen during the run; not adopted")
    assert stack.current_version("shop") is None
    assert stack.state("shop").to_json() == before
