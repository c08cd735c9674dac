"""``ReplayResult`` JSON format ``rsi-replay/1`` against golden files (STYLE: versioned formats)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi_common.errors import InvalidInput
from rsi_common.replay import REPLAY_SCHEMA, ReplayResult

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "replay"
SPEC_FIELDS = {
    "world_id",
    "source",
    "answer",
    "status",
    "termination_reason",
    "policy_tokens",
    "steps",
    "params_read",
    "off_support",
    "off_support_calls",
    "answered",
    "transcript",
    "error",
    "seconds",
}


def test_golden_v1_round_trips() -> None:
    data = json.loads((GOLDEN / "rsi-replay-1.json").read_text(encoding="utf-8"))
    result = ReplayResult.from_json(data)
    assert result.to_json() == data
    assert set(data) == SPEC_FIELDS | {"schema"} and data["schema"] == REPLAY_SCHEMA
    assert result.off_support == 1 and not result.missing


def test_golden_cache_entry_without_schema_or_transcript_loads() -> None:
    data = json.loads((GOLDEN / "rsi-replay-1-cache.json").read_text(encoding="utf-8"))
    result = ReplayResult.from_json(data)
    assert result.missing and result.transcript == []
    assert result.to_json(transcript=False) == {"schema": REPLAY_SCHEMA, **data}


def test_unknown_schema_and_missing_world_id_are_refused() -> None:
    with pytest.raises(InvalidInput):
        ReplayResult.from_json({"schema": "rsi-replay/9", "world_id": "w"})
    with pytest.raises(InvalidInput):
        ReplayResult.from_json({"schema": REPLAY_SCHEMA})
