"""``rsi bench`` reads a run's stored round through the typed run context, any stored version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi_common.stored import StoredDataError
from rsi_worker.bench.consolidate import failures_to_stop

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "run"


def test_failures_to_stop_reads_every_stored_version() -> None:
    v1 = json.loads((GOLDEN / "rsi-run-context-1.json").read_text("utf-8"))
    v2 = json.loads((GOLDEN / "rsi-run-context-2.json").read_text("utf-8"))
    # S★ = 0.5, δ = 0.25, two worlds of one check each, k = 2: only the fourth failure proves it
    expected = {"trials": 4, "needed": 4, "max_saving_pct": 0.0}
    assert failures_to_stop(v1, 2) == failures_to_stop(v2, 2) == expected
    early = json.loads((GOLDEN / "rsi-run-context-1-early.json").read_text("utf-8"))
    assert failures_to_stop(early, 2) == {"trials": 2, "needed": None}  # S★ = 0: nothing to stop
    assert failures_to_stop({}, 2) == {"trials": 0, "needed": None}


def test_failures_to_stop_refuses_a_hostile_round() -> None:
    v2 = json.loads((GOLDEN / "rsi-run-context-2.json").read_text("utf-8"))
    v2["round"]["S_star"] = "0.5"
    with pytest.raises(StoredDataError, match=r"^params\.round\.S_star: must be a number"):
        failures_to_stop(v2, 2)
