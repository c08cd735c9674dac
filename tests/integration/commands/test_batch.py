"""``rsi batch``: forced re-consolidation of many agents on real worker processes, resumable by
name; the in-process variant; leases held by other runs are waited for, not skipped."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from rsi_common.db import RunRow
from rsi_worker.jobs.batch import BatchRunner, InlineLauncher, batch_kind
from tests.integration.commands.conftest import Cli, corrected
from tests.support.cluster import Cluster
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(300)  # 50 runs on two real workers: a hang guard, not a budget


def batch_runs(stack: Stack, kind: str) -> list[RunRow]:
    with stack.sessions() as s:
        stmt = sa.select(RunRow).where(RunRow.kind == kind).order_by(RunRow.agent_id)
        rows = list(s.execute(stmt).scalars())
        s.commit()
    return rows


def test_batch_of_50_agents_on_two_workers_resumes(cli: Cli, stack: Stack, db_file: str, redis_url: str,
                                                   tmp_path: Path) -> None:
    agents = [f"agent{i:02d}" for i in range(50)]
    for agent in agents:
        corrected(stack, agent)
    with Cluster(tmp_path, db_file, redis_url, n=2, concurrency=4) as cluster:
        report = cli.json("batch", "--all", "--concurrency", "8", "--name", "model-v2")
        assert report["counts"] == {"adopted": 50}, (report, cluster.logs())
        runs = batch_runs(stack, "batch:model-v2")
        assert sorted(r.agent_id for r in runs) == agents  # one run per agent
        assert all(r.status == "adopted" and (r.params or {}).get("force") for r in runs)
        # a second invocation resumes: one interrupted agent is re-run, nobody else
        with stack.sessions.begin() as s:
            s.execute(sa.update(RunRow).where(RunRow.agent_id == "agent07").values(status="interrupted"))
        again = cli.json("batch", "--all", "--concurrency", "8", "--name", "model-v2")
    assert again["counts"] == {"earlier": 49, "kept": 1}, again
    rerun = next(o for o in again["outcomes"] if o["agent_id"] == "agent07")
    # forced: the corrected turn is re-considered although no signal changed since the last run
    assert rerun["reason"] == "the current harness already meets every criterion on these turns"
    runs = batch_runs(stack, "batch:model-v2")
    assert len(runs) == 51 and [r.agent_id for r in runs].count("agent07") == 2
    assert not redis.Redis.from_url(redis_url).keys("rsi:*:lease")


def test_inline_batch_selection_and_errors(cli: Cli, stack: Stack) -> None:
    corrected(stack, "a")  # clock 1_700_000_000 and +60
    corrected(stack, "b")  # +120, +180
    stack.say("c", "c1", "Compare phones: use search query=phones", signals={"stars": 5})  # +240
    stack.consolidate("a")  # ordinary run: a's correction is no longer fresh
    no_redis = {"RSI_REDIS_URL": ""}
    report = cli.json("batch", "--since", "2023-11-14T22:15", "--inline", env=no_redis)
    assert report["name"] == "all-20231114T2215"
    assert {o["agent_id"]: o["status"] for o in report["outcomes"]} == {"b": "adopted", "c": "recorded"}
    report = cli.json("batch", "-a", "a", "-a", "c", "--inline", env=no_redis)
    outcomes = {o["agent_id"]: (o["status"], o["reason"]) for o in report["outcomes"]}
    assert outcomes == {
        "a": ("kept", "the current harness already meets every criterion on these turns"),
        "c": ("recorded", "new signals only confirm the current answers"),
    }
    assert report["name"].startswith("ids-")
    for args, message in ((["batch"], "select agents"), (["batch", "--all", "-a", "a"], "not both"),
                          (["batch", "-a", "ghost", "--inline"], "unknown agent(s): 'ghost'"),
                          (["batch", "--all", "--name", "bad name"], "batch name 'bad name'")):
        result = cli(*args)
        assert result.exit_code == 1 and message in result.stderr, (args, result.stderr)
    no_broker = cli("batch", "--all", env=no_redis)
    assert no_broker.exit_code == 2 and "--inline" in no_broker.stderr


def test_a_held_lease_is_waited_for_not_skipped(stack: Stack) -> None:
    corrected(stack, "busy")
    held = stack.coord.try_begin("busy", "io-other")
    assert held is not None
    kind = batch_kind("wait")
    launcher = InlineLauncher(stack.deps, kind, concurrency=1)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the other run finishes while the batch waits
        sleeps.append(seconds)
        if len(sleeps) == 3:
            stack.coord.finish(held)

    runner = BatchRunner(stack.sessions, stack.coord, launcher, name="wait", retry_s=0.0, poll_s=0.0,
                         sleep=sleep)
    report = runner.run(["busy"])
    launcher.close()
    assert report.outcomes["busy"].status == "adopted" and len(sleeps) >= 3
    assert stack.coord.pending("busy") is None  # the batch never set the running run's pending mark
    assert [r.agent_id for r in batch_runs(stack, kind)] == ["busy"]


def test_a_dead_batch_run_is_closed_and_run_again(stack: Stack) -> None:
    """A batch run left ``running`` by a dead process (no lease) is closed as interrupted, then re-run."""
    from rsi_common.db import start_run

    corrected(stack, "orphan")
    kind = batch_kind("resume")
    with stack.sessions.begin() as s:
        dead = start_run(s, "orphan", fence=1, io_id=stack.latest_io("orphan"), kind=kind).id
    launcher = InlineLauncher(stack.deps, kind, concurrency=1)
    runner = BatchRunner(stack.sessions, stack.coord, launcher, name="resume", grace_s=0.0, retry_s=0.0,
                         poll_s=0.0, sleep=lambda _s: None)
    outcome = runner.run(["orphan"]).outcomes["orphan"]
    launcher.close()
    assert (outcome.status, outcome.attempts) == ("adopted", 1)
    runs = {r.id: r for r in batch_runs(stack, kind)}
    assert runs[dead].status == "interrupted" and runs[dead].reason == "lease lost (batch)"
    assert runs[outcome.run_id or ""].status == "adopted" and len(runs) == 2
