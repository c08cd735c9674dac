"""The job view ``rsi batch`` and ``rsi evolve run --wait`` share (rsi_worker/commands/jobview.py)."""

from __future__ import annotations

from typing import Any

import pytest

from rsi_worker.commands.jobview import JobProgress, outcome_table, poll_until


def test_progress_counts_outcomes_and_polling_returns_a_value(capsys: pytest.CaptureFixture[str]) -> None:
    reads = iter([None, None, "done"])
    assert poll_until(lambda: next(reads), interval_s=0) == "done"
    with JobProgress.show("evolve", "r", 3, quiet=True) as progress:
        progress.advance("earlier")
        progress.advance("adopted", 2)
    assert progress.counts == {"earlier": 1, "adopted": 2}
    assert capsys.readouterr().out == ""  # quiet: stdout stays the job's report


def test_outcome_table_names_each_outcome_with_its_count_and_first_units(
    capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    outcome_table("rsi batch b (7 agents, 1.0 s)", {"kept": [f"a{i}" for i in range(6)], "adopted": ["z"]},
                  unit="agents")
    out = capsys.readouterr().out
    assert "agents" in out and "a0, a1, a2, a3, a4 (+1)" in out and "adopted" in out and "z" in out
