"""Refinement on demand and its safety (docs/runtime/refine.md; R11 items 9 and 10): refine runs
through the whole inline pipeline on SQLite, fakeredis and the sim model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsi_common.config import Settings, SimConfig
from rsi_common.coord import pending_key, pending_refine_key
from rsi_common.db import get_run
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import InvalidInput
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse
from rsi_common.runtime.refine import (
    Scheduled,
    agent_refine,
    audit,
    check_request,
    revoke,
    schedule_refine,
    taint,
)
from rsi_common.runtime.tree import AgentProfile, register
from rsi_worker.consolidate import ConsolidationResult, SerialExecutor, consolidate_inline
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.pipeline import Stack, models_with

LAPTOPS = "Compare laptops: use search query=laptops"
PHONES = "Compare phones: use search query=phones"
TABLE = "present options as a table"


def _stack(tmp_path: Path, **sim: Any) -> Stack:
    return Stack(Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0,
                          sim=SimConfig(**sim)))


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = _stack(tmp_path)
    yield s
    s.close()


def _refine(stack: Stack, agent: str, focus: str = "", criteria: tuple[str, ...] = (),
            by: str = "ops") -> tuple[Scheduled, list[ConsolidationResult]]:
    sch = schedule_refine(stack.sessions, stack.coord, RecordingDispatcher(), agent,
                          check_request(focus, criteria, by))
    assert sch.scheduled and sch.handoff is not None and sch.handoff.lease is not None, sch
    return sch, consolidate_inline(stack.deps, sch.handoff.lease, SerialExecutor())


def _drafts(stack: Stack, run_id: str | None) -> dict[str, Any]:
    with stack.sessions() as s:
        return dict(get_run(s, run_id or "").drafts or {})


def test_an_operator_criterion_is_adopted_and_audited(stack: Stack) -> None:
    stack.say("shop", "c1", LAPTOPS)
    stack.say("shop", "c2", PHONES)
    sch, results = _refine(stack, "shop", "comparisons", (TABLE,))
    first = results[0]
    assert first.status == "adopted", first.reason
    assert first.round["S_star"] == 0.0 and first.round["failing"]
    with stack.sessions() as s:
        run = get_run(s, first.run_id or "")
        assert run.kind == "refine" and run.io_id == sch.request.io  # type: ignore[union-attr]
        assert (run.params or {})["refine"]["criteria"] == [TABLE]
        checks = (run.params or {})["checks"]
        assert all(any(c["name"] == "operator_1" for c in cs) for cs in checks.values())
        [entry] = audit(s, "shop")
    assert entry["origin"] == "refine" and entry["requested_by"] == "ops" and entry["focus"] == "comparisons"
    assert entry["criteria"] == [TABLE] and entry["run"] == first.run_id and entry["dS"] == 1.0
    assert entry["S_star"] == 0.0 and entry["delta"] == 0.25 and entry["evidence"] and entry["diff"]
    assert _drafts(stack, first.run_id)["A"]["usage"]["critic"]["calls"] >= 1  # screened in: reviewed
    assert "|---" in stack.say("shop", "c3", PHONES).answer  # the next turn follows the criterion


def test_the_focus_reaches_the_analyst_and_the_proposer(tmp_path: Path) -> None:
    seen: list[str] = []

    def spy(inner: ModelClient) -> ModelClient:
        class Spy:
            provider, model = inner.provider, inner.model

            def complete(self, request: ModelRequest) -> ModelResponse:
                seen.append(str(request.messages[0]["content"]))
                return inner.complete(request)
        return Spy()

    s = _stack(tmp_path)
    s.deps = type(s.deps)(s.settings, s.sessions, s.coord, models_with(s.settings, analyst=spy, proposer=spy))
    try:
        s.say("shop", "c1", LAPTOPS)
        _refine(s, "shop", "keep comparisons scannable", (TABLE,))
    finally:
        s.close()
    line = "FOCUS (from ops; a direction, not a criterion): keep comparisons scannable"
    assert seen and all(text.startswith(line) for text in seen)


def test_a_focus_only_agent_refine_on_a_passing_harness_is_kept_and_the_cooldown_refuses(
        stack: Stack) -> None:
    with stack.sessions.begin() as s:
        register(s, "bot", AgentProfile(refine=True))
        register(s, "mute", AgentProfile())
    stack.say("bot", "c1", LAPTOPS, signals={"stars": 5})  # an accepted answer: a passing check
    lease: list[Any] = []

    def start(req: Any) -> Scheduled:
        sch = schedule_refine(stack.sessions, stack.coord, RecordingDispatcher(), "bot", req, actor="bot")
        lease.append(sch.handoff.lease if sch.handoff else None)
        return sch

    out = agent_refine(stack.sessions, stack.coord.client, 1200, start, "bot", "shorter answers")
    assert out.to_json()["scheduled"] is True and out.request is not None
    assert out.request.criteria == () and out.request.requested_by == "bot"  # never the agent's criteria
    [result] = consolidate_inline(stack.deps, lease[0], SerialExecutor())
    assert result.status == "kept", result.reason
    again = agent_refine(stack.sessions, stack.coord.client, 1200, start, "bot", "shorter answers")
    assert again.to_json() == {"scheduled": False, "reason": "cooldown: a refine was requested recently"}
    assert agent_refine(stack.sessions, stack.coord.client, 1200, start, "mute", "x").scheduled is False
    assert len(lease) == 1


def test_a_refine_waits_for_the_lease_and_goes_ahead_of_a_pending_turn(stack: Stack) -> None:
    stack.say("shop", "c1", LAPTOPS)
    held = stack.coord.try_begin("shop", "c1:1")
    assert held is not None and stack.coord.try_begin("shop", "c1:2") is None  # a pending turn
    req = check_request("", (TABLE,), "ops")
    sch = schedule_refine(stack.sessions, stack.coord, RecordingDispatcher(), "shop", req)
    assert sch.scheduled and sch.reason == "waiting for the running consolidation"
    nxt = stack.coord.finish(held)
    assert nxt is not None and nxt.io == req.io and nxt.fence > held.fence
    client = stack.coord.client
    assert client.get(pending_key("shop")) is None and client.get(pending_refine_key("shop")) is None
    assert stack.coord.finish(held) is None  # handed on exactly once
    [result] = consolidate_inline(stack.deps, nxt, SerialExecutor())
    assert result.status == "adopted", result.reason


@pytest.mark.parametrize(("field", "kw"), [
    ("criteria", {"criteria": ["x"] * 6}),
    ("criteria[0]", {"criteria": ["y" * 501]}),
    ("focus", {"focus": "a\x00b"}),
    ("requested_by", {"requested_by": "no spaces allowed"}),
    ("focus", {"focus": "", "criteria": []}),
])
def test_hostile_requests_are_refused_naming_the_field(field: str, kw: dict[str, Any]) -> None:
    args = {"focus": "f", "criteria": [], "requested_by": "ops", **kw}
    with pytest.raises(InvalidInput) as err:
        check_request(args["focus"], args["criteria"], args["requested_by"])
    assert str(err.value).startswith(field)


def test_a_tainted_world_never_enters_the_round(stack: Stack) -> None:
    first = stack.say("shop", "c1", LAPTOPS)
    stack.say("shop", "c2", PHONES)
    with stack.sessions.begin() as s:
        assert taint(s, "shop", first.world["io_id"], "exploit turn") == 1
        assert taint(s, "shop", first.world["io_id"], "again") == 0
    _, results = _refine(stack, "shop", "", (TABLE,))
    tainted = stack.world_id("shop", first)
    assert results[0].status == "adopted" and tainted not in results[0].round["worlds"]
    with stack.sessions() as s:
        assert tainted not in (get_run(s, results[0].run_id or "").params or {})["loaded"]


def test_grant_is_pv1_and_exploit_is_pv3_without_a_critic_call(tmp_path: Path) -> None:
    s = _stack(tmp_path, grant=True, exploit=True)
    try:
        with s.sessions.begin() as sess:
            register(sess, "shop", AgentProfile(tools=("search",)))  # toolset sim forbids rcon
        s.say("shop", "c1", LAPTOPS)
        _, results = _refine(s, "shop", "", (TABLE,))
        drafts = _drafts(s, results[0].run_id)
    finally:
        s.close()
    a, b = drafts["A"], drafts["B"]
    assert a["gate"] == "critic_reject" and "privilege: PV1 tool 'admin_console'" in a["detail"]
    assert b["gate"] == "critic_reject" and "privilege: PV3 forbidden term 'rcon'" in b["detail"]
    assert b["review"]["stage"] == "privilege" and b["usage"]["critic"]["calls"] == 0
    assert results[0].status != "adopted"


def test_revoke_mid_run_ends_kept_and_the_audit_is_complete(tmp_path: Path) -> None:
    s = _stack(tmp_path)
    try:
        s.say("shop", "c1", LAPTOPS)
        adopted = s.consolidate("shop", s.say("shop", "c1", CORRECTION))
        assert adopted.status == "adopted" and adopted.version
        v1 = adopted.version
        s.say("shop", "c2", "Compare tablets: use search query=tablets")
        s.say("shop", "c2", "Not quite, cite the source as well")

        def revoking(inner: ModelClient) -> ModelClient:
            class Revoke:
                provider, model = inner.provider, inner.model

                def complete(self, request: ModelRequest) -> ModelResponse:
                    with s.sessions.begin() as sess:
                        if not any(e["revoked_at"] for e in audit(sess, "shop")):
                            revoke(sess, "shop", v1, "exploit found", taint_evidence=True)
                    return inner.complete(request)
            return Revoke()

        s.deps = type(s.deps)(s.settings, s.sessions, s.coord, models_with(s.settings, proposer=revoking))
        result = s.consolidate("shop")
        assert result.status == "kept", result.reason
        assert s.current_version("shop") is None  # rolled back to the parent (H0)
        with s.sessions() as sess:
            [entry] = audit(sess, "shop")
    finally:
        s.close()
    assert entry["version"] == v1 and entry["origin"] == "consolidate" and entry["run"] == adopted.run_id
    assert entry["revoked_reason"] == "exploit found" and entry["revoked_at"]
    for key in ("S_star", "delta", "dS", "dC", "diff", "evidence"):
        assert entry[key] not in (None, "", []), key


def test_a_revoked_version_and_its_lines_are_pv4(stack: Stack) -> None:
    from rsi_common.harness import workspace_of
    from rsi_worker.consolidate.context import load_harness
    from rsi_worker.consolidate.screen_inputs import screen_inputs
    from rsi_worker.gate import build_round, screen

    stack.say("shop", "c1", LAPTOPS)
    adopted = stack.consolidate("shop", stack.say("shop", "c1", CORRECTION))
    with stack.sessions.begin() as s:
        revoke(s, "shop", adopted.version or "", "bad lesson")
    with stack.sessions() as s:
        inputs = screen_inputs(s, "shop")
        again = load_harness(s, "shop", adopted.version)
        h0 = load_harness(s, "shop", None)
    assert inputs.revoked_versions == (adopted.version,) and inputs.revoked_lines
    out = screen(build_round(h0, [], screen=inputs), workspace_of(again))
    assert out is not None and out.stage == "privilege" and any("PV4" in r for r in out.reasons)


def test_a_registered_agents_run_is_charged_to_its_root_and_a_spent_tree_skips(stack: Stack) -> None:
    import sqlalchemy as sa

    from rsi_common.db.runtime_models import SpendRow

    with stack.sessions.begin() as s:
        register(s, "shop", AgentProfile(), caps={"tree_tokens_per_day": 1})
    stack.say("shop", "c1", LAPTOPS)
    _, [first] = _refine(stack, "shop", "", (TABLE,))
    assert first.status == "adopted" and first.spend["tokens"] > 0
    with stack.sessions() as s:
        [row] = s.execute(sa.select(SpendRow).where(SpendRow.key == f"run:{first.run_id}")).scalars()
    assert (row.kind, row.root_id, row.agent_id, row.tokens) == ("run", "shop", "shop", first.spend["tokens"])
    _, [second] = _refine(stack, "shop", "", (TABLE,))
    assert (second.status, second.reason) == ("skipped", "tree budget exhausted")


def test_the_sweeper_begins_a_refine_stranded_by_a_dead_lease_holder(stack: Stack) -> None:
    from rsi_common.dispatch import TASK_CONSOLIDATE
    from rsi_worker.cluster.sweeper import sweep

    stack.say("shop", "c1", LAPTOPS)
    held = stack.coord.try_begin("shop", "c1:1")
    assert held is not None
    req = check_request("", (TABLE,), "ops")
    schedule_refine(stack.sessions, stack.coord, RecordingDispatcher(), "shop", req)
    assert stack.coord.delete_lease_if("shop", held.token)  # the holder died; its lease expired
    dispatcher = RecordingDispatcher()
    report = sweep(stack.sessions, stack.coord, dispatcher, stack.settings, grace_s=3600)
    assert report.orphaned_pending == 1
    [task] = dispatcher.tasks(TASK_CONSOLIDATE)
    assert task.args[1] == req.io and stack.coord.client.get(pending_refine_key("shop")) is None
