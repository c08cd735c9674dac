"""The run context ``rsi-run-context/2`` and its round against golden files (STYLE: versioned formats):
old stored rows still load, the migrator table is consulted, hostile rows are refused naming the field."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from rsi_common.math import EvalResult
from rsi_common.stored import StoredDataError
from rsi_worker.consolidate import context as context_mod
from rsi_worker.consolidate.context import (
    CONTEXT_SCHEMA,
    CONTEXT_V1,
    MIGRATIONS,
    RoundContext,
    migrate_context,
)
from rsi_worker.consolidate.round import PARAM_KEYS, IncumbentBrief, Judged, Round, RoundParams

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "run"


def golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / name).read_text(encoding="utf-8"))
    return data


def test_golden_files_are_stable_bytes() -> None:
    for path in GOLDEN.glob("*.json"):
        text = path.read_text("utf-8")
        assert text.endswith("}\n")
        assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("name", ["rsi-run-context-2.json", "rsi-run-context-2-judged.json"])
def test_golden_v2_round_trips(name: str) -> None:
    data = golden(name)
    ctx = RoundContext.from_json(data)
    assert data["schema"] == CONTEXT_SCHEMA == RoundContext.SCHEMA
    assert ctx.to_json() == data
    assert list(ctx.to_json()) == list(data)  # field order is part of the format


def test_golden_v2_reads_typed() -> None:
    ctx = RoundContext.from_json(golden("rsi-run-context-2.json"))
    rnd = ctx.round.set_up()
    assert isinstance(rnd, RoundParams) and isinstance(rnd.delta, float) and isinstance(rnd.b_t, int)
    assert (rnd.S_star, rnd.S_t, rnd.delta, rnd.unit, rnd.b_t, rnd.sigma) == (0.5, 0.5, 0.25, 0.25, 3, 0)
    assert rnd.failing == ("w_7641fdb131517e4c0a491143",) and rnd.enabled[0] == "prompt"
    assert rnd.prune[0].component == "skill" and rnd.prune[0].accepted_edits_in_incumbent[0].edit_id == "E1"
    assert rnd.exploration.untried[0] == "control_flow" and rnd.calibration.n_tasks == 2
    brief, inc_ev = ctx.round.measured()
    assert brief.sources == {"cached": 2, "replay": 2} and isinstance(inc_ev, EvalResult)
    assert list(inc_ev.per_task) == ctx.worlds and ctx.round.judged is None
    judged = RoundContext.from_json(golden("rsi-run-context-2-judged.json")).round.judged
    assert isinstance(judged, Judged) and judged.winner == "A" and judged.gain == 0.5
    assert judged.learned and judged.learned[0].lesson and judged.records[0]["outcome"] == "ACCEPTED"


def test_version_1_row_migrates_to_the_version_2_golden() -> None:
    """The unversioned context the code wrote before this format (version 1) still loads, and
    loads exactly as this code writes the same run."""
    old = golden("rsi-run-context-1.json")
    assert "schema" not in old
    before = copy.deepcopy(old)
    assert RoundContext.from_json(old).to_json() == golden("rsi-run-context-2.json")
    assert migrate_context(old) == golden("rsi-run-context-2.json")
    assert old == before  # the input is not changed


def test_early_version_1_row_fills_the_late_fields() -> None:
    early = golden("rsi-run-context-1-early.json")
    for key in ("lessons", "skipped_worlds", "force"):
        assert key not in early
    assert "sources" not in early["round"]["incumbent"]
    ctx = RoundContext.from_json(early)
    assert ctx.lessons == [] and ctx.skipped_worlds == {} and ctx.force is False
    assert ctx.round.incumbent is not None and ctx.round.incumbent.sources == {}
    assert RoundContext.from_json(ctx.to_json()) == ctx


def test_version_1_judged_round_without_learned_loads() -> None:
    old = golden("rsi-run-context-2-judged.json")
    del old["schema"]
    del old["round"]["judged"]["learned"]
    judged = RoundContext.from_json(old).round.judged
    assert judged is not None and judged.learned == ()


def test_migration_table_is_consulted(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(MIGRATIONS) == {CONTEXT_V1}

    def from_v0(obj: dict[str, Any]) -> dict[str, Any]:
        obj = dict(obj, schema=CONTEXT_V1)
        obj["agent_id"] = obj.pop("agent")
        return obj

    monkeypatch.setitem(context_mod.MIGRATIONS, "rsi-run-context/0", from_v0)
    old = golden("rsi-run-context-1.json")
    old["schema"] = "rsi-run-context/0"
    old["agent"] = old.pop("agent_id")
    assert RoundContext.from_json(old).to_json() == golden("rsi-run-context-2.json")


def test_new_context_round_trips() -> None:
    ctx = RoundContext(run_id="run_1", agent_id="a", fence=7, token="t", io_id=None)
    data = ctx.to_json()
    assert data["schema"] == CONTEXT_SCHEMA and data["round"] == {}
    assert RoundContext.from_json(data) == ctx


def test_kept_round_holds_only_the_incumbent() -> None:
    brief, inc_ev = RoundContext.from_json(golden("rsi-run-context-2.json")).round.measured()
    rnd = Round(brief, inc_ev)
    assert set(rnd.to_json()) == {"incumbent", "inc_ev"}
    assert Round.from_json(rnd.to_json()) == rnd
    with pytest.raises(StoredDataError, match="not set yet"):
        rnd.set_up()
    with pytest.raises(StoredDataError, match="not measured yet"):
        Round().measured()


def test_round_stages_must_be_consistent() -> None:
    full = RoundContext.from_json(golden("rsi-run-context-2.json")).round
    with pytest.raises(ValueError):
        Round(full.incumbent, None)
    with pytest.raises(ValueError):
        Round(None, None, full.params)
    judged = RoundContext.from_json(golden("rsi-run-context-2-judged.json")).round.judged
    with pytest.raises(ValueError):
        dataclasses.replace(Round(full.incumbent, full.inc_ev), judged=judged)


def _refused(edit: Any, match: str, name: str = "rsi-run-context-2.json") -> None:
    data = golden(name)
    edit(data)
    with pytest.raises(StoredDataError, match=match):
        RoundContext.from_json(data)


def test_unknown_keys_are_refused_by_name() -> None:
    _refused(lambda d: d.update(extra=1), r"^params: unknown key 'extra'")
    _refused(lambda d: d["round"].update(S_start=0.5), r"^params\.round: unknown key 'S_start'")
    _refused(lambda d: d["round"]["incumbent"].update(note="x"),
             r"^params\.round\.incumbent: unknown key 'note'")
    _refused(lambda d: d["round"]["calibration"].update(seed=1),
             r"^params\.round\.calibration: unknown key 'seed'")
    _refused(lambda d: d["round"]["exploration"].update(w=1), r"^params\.round\.exploration: unknown key 'w'")
    _refused(lambda d: d["round"]["prune"][0].update(why=""),
             r"^params\.round\.prune\[0\]: unknown key 'why'")
    _refused(lambda d: d["round"]["inc_ev"].update(R=1), r"^params\.round\.inc_ev: unknown key 'R'")
    _refused(lambda d: next(iter(d["round"]["inc_ev"]["per_task"].values())).update(x=1),
             r"^params\.round\.inc_ev\.per_task\.w_\w+: unknown key 'x'")
    _refused(lambda d: d["usage"]["signal"].update(cost=1), r"^params\.usage\.signal: unknown key 'cost'")
    _refused(lambda d: d["round"]["judged"].update(loser="B"), r"^params\.round\.judged: unknown key 'loser'",
             "rsi-run-context-2-judged.json")
    # version 1 never wrote other keys either: an unknown key in an old row is refused as well
    old = golden("rsi-run-context-1.json")
    old["round"]["bonus"] = 1
    with pytest.raises(StoredDataError, match=r"^params\.round: unknown key 'bonus'"):
        RoundContext.from_json(old)


def test_a_credential_shaped_key_is_not_echoed() -> None:
    shaped = "sk-ant-api03-" + "A" * 40
    data = golden("rsi-run-context-2.json")
    data["round"][shaped] = 1
    with pytest.raises(StoredDataError) as info:
        RoundContext.from_json(data)
    assert shaped not in str(info.value) and "unknown key" in str(info.value)


def test_wrong_types_are_refused_by_field() -> None:
    _refused(lambda d: d["round"].update(delta="0.25"), r"^params\.round\.delta: must be a number, got str")
    _refused(lambda d: d["round"].update(b_t=3.0), r"^params\.round\.b_t: must be an integer")
    _refused(lambda d: d["round"].update(S_star=True), r"^params\.round\.S_star: must be a number, got bool")
    _refused(lambda d: d["round"].update(sigma=2), r"^params\.round\.sigma: must be 0 or 1")
    _refused(lambda d: d["round"].update(failing="w_1"), r"^params\.round\.failing: must be a JSON array")
    _refused(lambda d: d["round"].update(enabled=["prompt", 3]),
             r"^params\.round\.enabled\[1\]: must be a string")
    _refused(lambda d: d["round"].update(reserved=[-1]), r"^params\.round\.reserved\[0\]: must be >= 0")
    _refused(lambda d: d["round"]["inc_ev"].update(S=2.0), r"^params\.round\.inc_ev: S must lie in \[0, 1\]")
    _refused(lambda d: d["round"]["calibration"].update(k=0), r"^params\.round\.calibration: k must be >= 1")
    _refused(lambda d: d.update(fence="7"), r"^params\.fence: must be an integer")
    _refused(lambda d: d.update(phase="judging"), r"^params\.phase: unknown phase 'judging'")
    _refused(lambda d: d.update(worlds=None), r"^params\.worlds: must be a JSON array")
    _refused(lambda d: d.update(early_stop=1), r"^params\.early_stop: must be true or false")
    _refused(lambda d: d["round"]["judged"].update(gain=float("nan")),
             r"^params\.round\.judged\.gain: must be finite",
             "rsi-run-context-2-judged.json")


def test_missing_fields_are_refused_by_name() -> None:
    _refused(lambda d: d.pop("worlds"), r"^params: missing key 'worlds'")
    _refused(lambda d: d.pop("lessons"), r"^params: missing key 'lessons'")  # required from version 2 on
    _refused(lambda d: d["round"].pop("delta"), r"^params\.round: missing key 'delta'")
    _refused(lambda d: d["round"].pop("inc_ev"), r"^params\.round: missing key 'inc_ev'")
    _refused(lambda d: d["round"]["incumbent"].pop("sources"),
             r"^params\.round\.incumbent: missing key 'sources'")
    _refused(lambda d: d["round"]["judged"].pop("learned"), r"^params\.round\.judged: missing key 'learned'",
             "rsi-run-context-2-judged.json")
    for key in PARAM_KEYS:  # a set-up round has every parameter
        _refused(lambda d, key=key: d["round"].pop(key), rf"^params\.round: missing key '{key}'")


def test_unknown_format_and_non_objects_are_refused() -> None:
    _refused(lambda d: d.update(schema="rsi-run-context/9"),
             r"^params\.schema: unknown run context format 'rsi-run-context/9'")
    _refused(lambda d: d.update(schema=2), r"^params\.schema: unknown run context format 2")
    with pytest.raises(StoredDataError, match=r"^params: must be a JSON object, got list"):
        RoundContext.from_json([])
    _refused(lambda d: d.update(round=[]), r"^params\.round: must be a JSON object, got list")


def test_steps_read_typed_values() -> None:
    """No step reads the round through string keys or ``float()`` casts (only the format's own
    modules, the reader and the version 1 migrator, see its JSON)."""
    root = Path(__file__).resolve().parents[3] / "rsi_worker" / "consolidate"
    steps = [p for p in root.glob("*.py") if p.name not in ("context.py", "round.py")]
    assert len(steps) > 10
    for path in steps:
        text = path.read_text("utf-8")
        assert 'round["' not in text and "round.get(" not in text and 'rnd["' not in text, path.name
        assert "float(rnd" not in text and "int(rnd" not in text, path.name


def test_incumbent_brief_counts_sources() -> None:
    inc_ev = RoundContext.from_json(golden("rsi-run-context-2.json")).round.inc_ev
    assert inc_ev is not None
    rows = [{"source": "replay"}, {"source": "cached"}, {"source": "replay"}]
    brief = IncumbentBrief.of(inc_ev, rows)
    assert brief.sources == {"cached": 1, "replay": 2} and brief.S == 0.5 and brief.n_expected == 4
    assert IncumbentBrief.from_json(brief.to_json(), "b") == brief
