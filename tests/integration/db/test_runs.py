"""Runs: idempotent start, the fenced final write's three branches, retention, the sweeper."""

from __future__ import annotations

import time
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db import (
    KEPT_REASON,
    Adoption,
    ReplayRow,
    RunRow,
    add_harness,
    ensure_agent,
    final_write,
    finish_run,
    get_agent,
    get_run,
    lineage,
    mark_interrupted,
    replay_rows,
    rollback_to,
    running_runs,
    runs,
    save_replay_row,
    set_run_drafts,
    set_run_params,
    skip_run,
    stale_runs,
    start_run,
)
from rsi_common.errors import InvalidInput, UnknownAgentError

PAYLOAD = {"manifest": {"name": "h1"}, "files": {}, "version": "sha256:v1"}
SUMMARY = {"status": "adopted", "reason": "variant A adopted (+0.2500)", "start_version": None,
           "version": "sha256:v1", "adopted": True}


def _start(factory: sessionmaker[Session], agent: str, fence: int, io: str = "io1") -> RunRow:
    with factory.begin() as s:
        ensure_agent(s, agent)
        return start_run(s, agent, fence=fence, io_id=io)


def _final(factory: sessionmaker[Session], run_id: str, **kw: Any) -> Any:
    with factory.begin() as s:
        return final_write(s, run_id, **kw)


def test_start_run_is_idempotent_per_fence(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 7)
    assert (run.status, run.fence, run.kind, run.io_id, run.start_version) == (
        "running", 7, "consolidate", "io1", None)
    assert run.started_at.tzinfo is not None and run.finished_at is None
    again = _start(factory, "a1", 7, io="io2")
    assert again.id == run.id and again.io_id == "io1"
    other = _start(factory, "a2", 7)
    assert other.id != run.id
    with factory.begin() as s, pytest.raises(UnknownAgentError):
        start_run(s, "nobody", fence=1, io_id="x")


def test_run_params_and_drafts_only_while_running(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 1)
    with factory.begin() as s:
        assert set_run_params(s, run.id, {"delta": 0.0625, "worlds": ["w_b", "w_a"]})
        assert set_run_drafts(s, run.id, {"A": {"gate": None}, "B": {"gate": "critic_reject"}})
    _final(factory, run.id, status="recorded", reason="no worlds", result={"status": "recorded"},
           state={"t": 0})
    with factory.begin() as s:
        assert not set_run_params(s, run.id, {"delta": 1.0})
        stored = get_run(s, run.id)
        assert stored.params == {"delta": 0.0625, "worlds": ["w_b", "w_a"]}
        assert list(stored.drafts or {}) == ["A", "B"]


def test_final_write_records_state_and_fence(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 5)
    state = {"t": 1, "verdicts": {"k2": [True, "ok"], "k1": [False, "no"]}}
    done = _final(factory, run.id, status="recorded", reason="no turn has a signal to learn from yet",
                  result={"status": "recorded"}, state=state)
    assert done.outcome == "written" and done.applied
    assert done.run.status == "recorded" and done.run.finished_at is not None
    with factory.begin() as s:
        agent = get_agent(s, "a1")
        assert agent.state == state and list(agent.state["verdicts"]) == ["k2", "k1"]
        assert agent.applied_fence == 5 and agent.current_version is None


def test_final_write_adopts(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 5)
    done = _final(factory, run.id, status="adopted", reason="variant A adopted", result=SUMMARY,
                  state={"t": 1}, adoption=Adoption("sha256:v1", PAYLOAD))
    assert done.outcome == "adopted"
    assert (done.run.status, done.run.adopted_version) == ("adopted", "sha256:v1")
    agent = done.agent
    assert (agent.current_version, agent.applied_fence, agent.state) == ("sha256:v1", 5, {"t": 1})
    with factory.begin() as s:
        (h,) = lineage(s, "a1")
        assert (h.version, h.parent_version, h.run_id, h.payload, h.summary) == (
            "sha256:v1", None, run.id, PAYLOAD, SUMMARY)
    # the next run starts from the adopted version and records it as the parent
    run2 = _start(factory, "a1", 6)
    assert run2.start_version == "sha256:v1"
    payload2 = {**PAYLOAD, "version": "sha256:v2"}
    _final(factory, run2.id, status="adopted", result=SUMMARY, state={"t": 2},
           adoption=Adoption("sha256:v2", payload2, summary={"note": "x"}))
    with factory.begin() as s:
        assert [(h.version, h.parent_version, h.summary) for h in lineage(s, "a1")] == [
            ("sha256:v1", None, SUMMARY), ("sha256:v2", "sha256:v1", {"note": "x"})]


def test_a_newer_fence_supersedes_an_older_run(factory: sessionmaker[Session]) -> None:
    old = _start(factory, "a1", 10)
    new = _start(factory, "a1", 11)
    assert _final(factory, new.id, status="recorded", state={"by": "new"}).outcome == "written"
    done = _final(factory, old.id, status="adopted", state={"by": "old"}, result=SUMMARY,
                  adoption=Adoption("sha256:v1", PAYLOAD))
    assert done.outcome == "superseded" and not done.applied
    assert (done.run.status, done.run.reason) == ("interrupted", "superseded")
    with factory.begin() as s:
        agent = get_agent(s, "a1")
        assert (agent.state, agent.applied_fence, agent.current_version) == ({"by": "new"}, 11, None)
        assert lineage(s, "a1") == []


def test_a_stale_holder_is_refused_after_the_sweeper_closed_its_run(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 3)
    with factory.begin() as s:
        assert mark_interrupted(s, [run.id]) == [run.id]
        assert mark_interrupted(s, [run.id]) == []
    done = _final(factory, run.id, status="adopted", state={"t": 9}, result=SUMMARY,
                  adoption=Adoption("sha256:v1", PAYLOAD))
    assert done.outcome == "superseded"
    assert (done.run.status, done.run.reason) == ("interrupted", "lease expired")
    with factory.begin() as s:
        agent = get_agent(s, "a1")
        assert (agent.state, agent.applied_fence, agent.current_version) == ({}, 0, None)


def test_a_rollback_during_the_run_wins(factory: sessionmaker[Session]) -> None:
    with factory.begin() as s:
        ensure_agent(s, "a1")
        add_harness(s, "a1", "sha256:v0", {**PAYLOAD, "version": "sha256:v0"})
        rollback_to(s, "a1", "sha256:v0")
    run = _start(factory, "a1", 4)
    assert run.start_version == "sha256:v0"
    with factory.begin() as s:
        rollback_to(s, "a1", None)  # the user goes back to H0 while the run is going
    done = _final(factory, run.id, status="adopted", reason="variant A adopted", result=SUMMARY,
                  state={"t": 1}, adoption=Adoption("sha256:v1", PAYLOAD))
    assert done.outcome == "kept" and not done.applied
    assert (done.run.status, done.run.reason, done.run.adopted_version) == ("kept", KEPT_REASON, None)
    assert done.run.result == {**SUMMARY, "status": "kept", "reason": KEPT_REASON, "adopted": False,
                               "version": "sha256:v0"}
    with factory.begin() as s:
        agent = get_agent(s, "a1")
        assert (agent.current_version, agent.state, agent.applied_fence) == (None, {}, 4)
        assert [h.version for h in lineage(s, "a1")] == ["sha256:v0"]


def test_a_failed_run_keeps_the_state(factory: sessionmaker[Session]) -> None:
    with factory.begin() as s:
        ensure_agent(s, "a1")
        get_agent(s, "a1").state = {"t": 3}
    run = _start(factory, "a1", 2)
    error = {"type": "ValueError", "message": "x"}
    done = _final(factory, run.id, status="failed", reason="boom", error=error)
    assert done.outcome == "written"
    assert (done.run.status, done.run.error) == ("failed", error)
    with factory.begin() as s:
        assert get_agent(s, "a1").state == {"t": 3} and get_agent(s, "a1").applied_fence == 2


def test_a_redelivered_final_write_adopts_once(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 5)
    kw: dict[str, Any] = {"status": "adopted", "result": SUMMARY, "state": {"t": 1},
                          "adoption": Adoption("sha256:v1", PAYLOAD)}
    assert _final(factory, run.id, **kw).outcome == "adopted"
    again = _final(factory, run.id, **kw)
    assert again.outcome == "superseded" and again.run.status == "adopted"
    with factory.begin() as s:
        assert len(lineage(s, "a1")) == 1


def test_final_write_rejects_bad_calls(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 1)
    with factory.begin() as s:
        with pytest.raises(InvalidInput):
            final_write(s, run.id, status="adopted")
        with pytest.raises(InvalidInput):
            final_write(s, run.id, status="recorded", adoption=Adoption("v", {}))
        with pytest.raises(InvalidInput):
            final_write(s, run.id, status="running")
        with pytest.raises(InvalidInput):
            final_write(s, "run_missing", status="recorded")
        skipped = skip_run(s, "a1", io_id="io9", reason="provider runs its own loop")
        with pytest.raises(InvalidInput):
            final_write(s, skipped.id, status="recorded")


def test_skip_and_finish(factory: sessionmaker[Session]) -> None:
    with factory.begin() as s:
        ensure_agent(s, "a1")
        skipped = skip_run(s, "a1", io_id="io1", reason="provider runs its own loop")
    assert (skipped.status, skipped.fence, skipped.reason) == ("skipped", None, "provider runs its own loop")
    assert skipped.finished_at is not None
    run = _start(factory, "a1", 1)
    with factory.begin() as s:
        assert finish_run(s, run.id, "skipped", reason="agent is frozen", result={"status": "skipped"})
        assert not finish_run(s, run.id, "failed")
        with pytest.raises(InvalidInput):
            finish_run(s, run.id, "adopted")
        assert get_run(s, run.id).status == "skipped"


def test_retention_keeps_the_latest_200_runs(factory: sessionmaker[Session]) -> None:
    first = _start(factory, "a1", 1)
    with factory.begin() as s:
        save_replay_row(s, first.id, "incumbent", "w_x", 0, status="ok", reward=1.0, weight=1.0)
    _final(factory, first.id, status="recorded")
    with factory.begin() as s:
        for fence in range(2, 206):
            run = start_run(s, "a1", fence=fence, io_id=f"io{fence}")
            if fence < 205:
                final_write(s, run.id, status="recorded")
    with factory.begin() as s:
        kept = runs(s, "a1", limit=1000)
        assert len(kept) == 200
        assert [r.fence for r in kept[:2]] == [205, 204] and kept[-1].fence == 6
        assert replay_rows(s, first.id) == []
        assert s.scalar(sa.select(sa.func.count()).select_from(ReplayRow)) == 0
        assert [r.fence for r in running_runs(s, "a1")] == [205]


def test_stale_runs_by_lease_and_by_age(factory: sessionmaker[Session]) -> None:
    r1, r2, r3 = (_start(factory, "a1", 1), _start(factory, "a2", 1), _start(factory, "a3", 1))
    _final(factory, r3.id, status="recorded")
    with factory.begin() as s:
        assert stale_runs(s, [], 3600) == []
        assert [r.id for r in stale_runs(s, [r2.id, r3.id], 3600)] == [r2.id]
    deadline = time.monotonic() + 60
    while True:  # by the database clock: every running run is older than 0 s once the clock moved
        with factory.begin() as s:
            ids = [r.id for r in stale_runs(s, [], 0)]
        if len(ids) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.002)
    assert ids == [r1.id, r2.id]
    with factory.begin() as s:
        assert sorted(mark_interrupted(s, ids, reason="stale")) == sorted(ids)
        assert running_runs(s) == []
