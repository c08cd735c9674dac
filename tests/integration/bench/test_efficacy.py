"""``rsi bench efficacy`` end to end on a small pool at noise 0: the JSON report's keys, and that the
pool learns (held-out pass rate under the final harness above H0's). The figures themselves are
reported by the benchmark, never asserted here."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rsi_worker.bench.efficacy import REQUIRED
from rsi_worker.cli import app


@pytest.mark.timeout(240)
def test_small_pool_learns_at_noise_0() -> None:
    args = ["bench", "efficacy", "--agents", "5", "--noise", "0", "--heldout", "3", "--noop-runs", "2",
            "--jobs", "1", "--seed", "3", "--json"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    level = report["0"]
    assert set(REQUIRED) <= set(level)
    assert level["agents"] == 5 and level["heldout_turns"] == 3 * level["learning_agents"]
    assert level["heldout_final"] > level["heldout_h0"]
    assert level["adoptions"] >= 1 and level["runs"] >= level["rounds"] >= 1
    assert {"noop_adoption_rate", "noop_runs", "noop_adoptions", "noop", "config", "targets"} <= set(report)
    assert report["noop_runs"] + report["noop"]["setup_failed"] + report["noop"]["no_drop"] >= 2
