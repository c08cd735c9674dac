"""validate_world, migration and the golden files of every format version (STYLE: versioned formats)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from rsi_common import world as world_mod
from rsi_common.errors import WorldError
from rsi_common.world import (
    MIGRATIONS,
    WORLD_SCHEMA,
    finalize_world,
    migrate_world,
    validate_world,
    world_bytes,
)

from .helpers import GOLDEN, golden


def test_golden_rsi_world_1_loads_unchanged() -> None:
    data = golden()
    assert validate_world(data) == data
    assert data["bytes"] == world_bytes(data)
    assert len(data["tools"]["calls"]) == 2 and data["schema"] == WORLD_SCHEMA


def test_golden_files_are_stable_bytes() -> None:
    for path in GOLDEN.glob("*.json"):
        text = path.read_text("utf-8")
        assert text.endswith("}\n") and json.loads(text)["schema"] == WORLD_SCHEMA


def test_early_format_golden_still_loads() -> None:
    """The first capture code wrote no truncated/images_dropped/bytes/memory/contributed/turn_notes."""
    early = golden("rsi-world-1-early.json")
    for key in ("truncated", "images_dropped", "bytes", "memory"):
        assert key not in early
    out = validate_world(early)
    assert out["truncated"] is False and out["images_dropped"] is False
    assert out["memory"] == {"present": False, "chunks": None}
    assert out["tools"]["contributed"] == [] and out["plan"]["turn_notes"] == []
    assert out["bytes"] == world_bytes(out)
    assert finalize_world(early) == out
    full = golden()
    assert {k: v for k, v in out.items() if k not in ("memory", "plan", "bytes")} == {
        k: v for k, v in full.items() if k not in ("memory", "plan", "bytes")
    }


def test_migration_table_is_consulted(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MIGRATIONS == {}

    def from_v0(obj: dict[str, Any]) -> dict[str, Any]:
        obj = dict(obj, schema=WORLD_SCHEMA)
        obj["agent_id"] = obj.pop("agent")
        return obj

    monkeypatch.setitem(world_mod.MIGRATIONS, "rsi-world/0", from_v0)
    old = golden()
    old["schema"] = "rsi-world/0"
    old["agent"] = old.pop("agent_id")
    assert validate_world(old) == golden()
    assert migrate_world(old)["schema"] == WORLD_SCHEMA and old["schema"] == "rsi-world/0"  # input untouched


def test_unknown_schema() -> None:
    with pytest.raises(WorldError, match=r"^schema: unknown world schema 'rsi-world/9'"):
        validate_world(dict(golden(), schema="rsi-world/9"))


def _broken(fn: Any) -> dict[str, Any]:
    w = golden()
    fn(w)
    return w


CASES: list[tuple[str, Any, str]] = [
    ("call name missing", lambda w: w["tools"]["calls"][1].pop("name"), "tools.calls[1].name"),
    ("call name number", lambda w: w["tools"]["calls"][0].update(name=5), "tools.calls[0].name"),
    ("call content", lambda w: w["tools"]["calls"][1].update(content={"x": 1}), "tools.calls[1].content"),
    ("call is_error", lambda w: w["tools"]["calls"][1].update(is_error="no"), "tools.calls[1].is_error"),
    ("message role", lambda w: w["state"]["messages"][1].update(role="system"), "state.messages[1].role"),
    ("system part", lambda w: w["plan"]["system_parts"].append(["only-id"]), "plan.system_parts[2]"),
    ("unsafe kwarg", lambda w: w["plan"]["kwargs"].update(api_key="x"), "plan.kwargs"),
    ("created_at", lambda w: w.update(created_at="yesterday"), "created_at"),
    ("clock", lambda w: w.update(clock="now"), "clock"),
    ("extra field", lambda w: w.update(secret_sauce=1), "secret_sauce"),
    ("extra plan field", lambda w: w["plan"].update(model="x"), "plan.model"),
    ("steps negative", lambda w: w["outcome"].update(steps=-1), "outcome.steps"),
    ("bool as int", lambda w: w["outcome"].update(policy_tokens=True), "outcome.policy_tokens"),
    ("chunk content", lambda w: w["memory"]["chunks"][0].pop("content"), "memory.chunks[0].content"),
    ("def name", lambda w: w["tools"]["defs"][0].update(name=""), "tools.defs[0].name"),
    ("missing outcome", lambda w: w.pop("outcome"), "outcome"),
    ("not JSON", lambda w: w["state"]["metadata"].update(x=object()), "state.metadata.x"),
    ("nan", lambda w: w.update(clock=float("nan")), "clock"),
]


@pytest.mark.parametrize(("case", "mutate", "path"), CASES, ids=[c[0] for c in CASES])
def test_malformed_worlds_name_the_field(case: str, mutate: Any, path: str) -> None:
    with pytest.raises(WorldError) as info:
        validate_world(_broken(mutate))
    assert str(info.value).startswith(path + ":") or f"; {path}:" in str(info.value), str(info.value)


def test_not_an_object() -> None:
    with pytest.raises(WorldError, match="must be a JSON object"):
        validate_world([1, 2])


def test_golden_with_defects_loads_unchanged() -> None:
    """The late field ``defects`` (input boundary repairs); absent in every other golden file."""
    data = golden("rsi-world-1-defects.json")
    assert validate_world(data) == data and data["bytes"] == world_bytes(data)
    assert data["defects"] == [{"path": "state.metadata.channel", "defect": "nul"},
                               {"path": "tools.calls[0].content", "defect": "lone_surrogate"}]
    assert "defects" not in golden() and "defects" not in validate_world(golden("rsi-world-1-early.json"))
    computed = ("bytes", "truncated", "images_dropped", "replayable")
    turn = {k: v for k, v in golden().items() if k not in computed}
    turn["tools"]["calls"][0]["content"] = "region | sum\nEMEA | 4655600 \ud83d"
    turn["state"]["metadata"]["channel"] = "web\x00"
    assert finalize_world(turn) == data


# The golden files as first committed: a format change that rewrites one of them fails here.
PINNED = {
    "rsi-world-1.json": "4271b376f495eed0217b22754b45495a391bce3c3174b631bf675676b715df79",
    "rsi-world-1-early.json": "8500227eaf3db708ff57c2b14cc864513fa2d648006fc852b266cfbcdc9fdca8",
    "rsi-world-1-defects.json": "db3e0d5ed7cbffd765c12febf0c0870f9802df72e3a02a60ed384c162afd3651",
}


def test_golden_with_runtime_loads_unchanged_and_older_goldens_are_untouched() -> None:
    """The late field ``runtime`` (docs/runtime/subagents.md#worlds-and-replay): present only in
    rsi-world-1-runtime.json (the resumed slice of the inline delegation to three children, compared
    with a fresh recording by tests/unit/runtime/test_replay_worlds.py); older golden files keep
    their bytes."""
    for name, digest in PINNED.items():
        assert hashlib.sha256((GOLDEN / name).read_bytes()).hexdigest() == digest, name
        assert "runtime" not in validate_world(golden(name))
    data = golden("rsi-world-1-runtime.json")
    assert validate_world(data) == data and data["bytes"] == world_bytes(data)
    assert data["runtime"] == {
        "root": "P", "parent": None, "depth": 0, "session": "main", "handle": None, "slice": 2,
        "request": "[message m_000000000000000000000001 from operator (operator)]\ntopic 0; topic 1; topic 2",
        "messages_in": []}
    computed = ("bytes", "truncated", "images_dropped", "replayable")
    assert finalize_world({k: v for k, v in data.items() if k not in computed}) == data
    broken: list[tuple[Any, str]] = [
        (lambda r: r.update(depth=4), "runtime.depth"), (lambda r: r.update(slice=0), "runtime.slice"),
        (lambda r: r.update(extra=1), "runtime.extra"), (lambda r: r.pop("root"), "runtime.root")]
    for mutate, path in broken:
        bad = golden("rsi-world-1-runtime.json")
        mutate(bad["runtime"])
        with pytest.raises(WorldError) as info:
            validate_world(bad)
        assert str(info.value).startswith(path + ":") or f"; {path}:" in str(info.value), str(info.value)
