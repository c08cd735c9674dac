"""``rsi demo --runtime`` (rsi_worker/jobs/runtime_demo.py): every step does what its log line says."""

from __future__ import annotations

from pathlib import Path

from rsi_worker.jobs.runtime_demo import run_runtime_demo


def test_the_runtime_demo_steps(tmp_path: Path) -> None:
    lines: list[str] = []
    steps = {s.name: s for s in run_runtime_demo(tmp_path / "demo", lines.append)}
    assert list(steps) == ["delegation", "messages", "refine", "goal", "exploit"]
    delegation = steps["delegation"]
    assert [h["status"] for h in delegation.detail["handles"]] == ["completed"] * 3
    assert delegation.detail["answer"].splitlines()[0].startswith("researcher-1: ")
    assert delegation.detail["children"] == ["lead.researcher"] and delegation.ok
    assert steps["messages"].detail["reply"] == "ack: please double-check the prices"
    refine = steps["refine"]
    assert refine.detail["status"] == "adopted" and "|---" in refine.detail["answer"]
    assert refine.detail["audit"]["origin"] == "refine" and refine.detail["audit"]["criteria"] == [
        "present options as a table"]
    goal = steps["goal"]
    assert goal.detail["answers"][-1].startswith("done") and goal.detail["goal"]["status"] == "completed"
    assert goal.detail["loop"]["status"] == "completed" and goal.detail["loop"]["reason"] == "goal_complete"
    rejected = steps["exploit"].detail["rejected"]
    assert "privilege: PV1 tool 'admin_console'" in rejected["A"]
    assert "privilege: PV3 forbidden term 'rcon'" in rejected["B"]
    assert all(s.ok for s in steps.values()) and lines[-1].startswith("done: delegation ok")
