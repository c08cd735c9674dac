"""The consolidation state ``rsi-consolidation-state/1`` against its golden file (STYLE: versioned
formats): it round-trips, the empty state of a new agent loads, the migrator table is consulted,
hostile rows are refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rsi_common.stored import StoredDataError
from rsi_worker.consolidate import state as state_mod
from rsi_worker.consolidate.context import RoundContext
from rsi_worker.consolidate.finalize import build_state
from rsi_worker.consolidate.result import ConsolidationResult
from rsi_worker.consolidate.state import MIGRATIONS, STATE_KEYS, STATE_SCHEMA, ConsolidationState

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "state"


def golden(name: str = "rsi-consolidation-state-1.json") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / name).read_text(encoding="utf-8"))
    return data


def test_golden_round_trips_in_field_order() -> None:
    data = golden()
    state = ConsolidationState.from_json(data)
    assert data["schema"] == STATE_SCHEMA
    assert state.to_json() == data and tuple(state.to_json()) == tuple(data) == STATE_KEYS
    assert state.t == 2 and state.progress == [0.0, 1.0, 1.5]
    assert state.records[0]["outcome"] == "ACCEPTED" and state.seen
    text = (GOLDEN / "rsi-consolidation-state-1.json").read_text("utf-8")
    assert text == json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def test_empty_and_schemaless_states_load() -> None:
    """A new agent's state is ``{}``; a state without ``schema`` is version 1 with defaults."""
    for empty in (None, {}):
        state = ConsolidationState.from_json(empty)
        assert state.t == 0 and state.progress == [0.0] and state.records == [] and state.seen == {}
        assert state.analysis == {"failure_modes": [], "success_habits": []}
    old = golden()
    del old["schema"], old["seen"], old["verdicts"]
    state = ConsolidationState.from_json(old)
    assert state.seen == {} and state.verdicts == {} and state.t == 2


def test_migration_table_is_consulted(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MIGRATIONS == {}

    def from_v0(obj: dict[str, Any]) -> dict[str, Any]:
        obj = dict(obj, schema=STATE_SCHEMA)
        obj["progress"] = obj.pop("trajectory")
        return obj

    monkeypatch.setitem(state_mod.MIGRATIONS, "rsi-consolidation-state/0", from_v0)
    old = golden()
    old["schema"] = "rsi-consolidation-state/0"
    old["trajectory"] = old.pop("progress")
    assert ConsolidationState.from_json(old).to_json() == golden()


def _refused(edit: Any, match: str) -> None:
    data = golden()
    edit(data)
    with pytest.raises(StoredDataError, match=match):
        ConsolidationState.from_json(data)


def test_hostile_states_are_refused_by_field() -> None:
    _refused(lambda d: d.update(schema="rsi-consolidation-state/9"),
             r"^state\.schema: unknown consolidation state format 'rsi-consolidation-state/9'")
    _refused(lambda d: d.update(lessons=[]), r"^state: unknown key 'lessons'")
    _refused(lambda d: d["analysis"].update(notes=[]), r"^state\.analysis: unknown key 'notes'")
    _refused(lambda d: d.update(t="2"), r"^state\.t: must be an integer, got str")
    _refused(lambda d: d.update(t=-1), r"^state\.t: must be >= 0")
    _refused(lambda d: d["progress"].append("1.5"), r"^state\.progress\[3\]: must be a number")
    _refused(lambda d: d["records"].append([1]), r"^state\.records\[3\]: must be a JSON object, got list")
    _refused(lambda d: d.update(seen={"w_1": 7}), r"^state\.seen\.w_1: must be a string")
    _refused(lambda d: d.update(cache={"v": []}), r"^state\.cache\.v: must be a JSON object, got list")
    _refused(lambda d: d.update(verdicts={"k": "yes"}), r"^state\.verdicts\.k: must be a JSON array")
    with pytest.raises(StoredDataError, match=r"^state: must be a JSON object, got list"):
        ConsolidationState.from_json([])  # type: ignore[arg-type]


def test_a_run_without_a_round_keeps_the_stored_state() -> None:
    """The no-signal path (docs/performance/consolidation.md#the-no-signal-path): a run whose round is
    empty, with no analysis and no trial rows, leaves the stored state alone when ``seen`` is
    unchanged — the empty :class:`Round` must read as empty (a dataclass is always truthy)."""
    data = golden()
    data["seen"] = {k: v for k, v in data["seen"].items() if v != "412d4ddc23b7b092"}  # no empty digests
    ctx = RoundContext(run_id="run_1", agent_id="shop", fence=1, token="t", io_id=None,
                       loaded=list(data["seen"]), digests=dict(data["seen"]))
    assert ctx.round.empty
    recorded = ConsolidationResult("recorded", "no new correction or problem to fix")
    deps: Any = None  # not used on this path
    assert build_state(deps, ctx, recorded, ConsolidationState.from_json(data), []) is None
    ctx.digests = {**ctx.digests, ctx.loaded[0]: "0123456789abcdef"}  # a signal changed: saved
    saved = build_state(deps, ctx, recorded, ConsolidationState.from_json(data), [])
    assert saved is not None and saved["seen"][ctx.loaded[0]] == "0123456789abcdef"
