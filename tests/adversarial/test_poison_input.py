"""Issue class 3: one bad character or a deeply nested value never stalls an agent.

World content is repaired (U+FFFD, listed in ``defects``), ids, keys and signals are refused, and
nothing deeper than 64 levels reaches recursive code: always the project's error naming the path
and the limit, never ``UnicodeEncodeError``, ``RecursionError`` or a bare ``ValueError``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from rsi_common.boundary import (
    MAX_DEPTH,
    REPLACEMENT_CHAR,
    check_depth,
    json_text_depth,
    scan,
)
from rsi_common.client import RsiClient
from rsi_common.errors import InputLimitError, InvalidInput, RsiError, WorldError, WorldLimitError
from rsi_common.harness import build_harness, h0, materialize
from rsi_common.host_input import check_signals, parse_turn
from rsi_common.kernel import ToolDef, run_turn
from rsi_common.kernel.testing import ScriptedModel, text_response, tool_response
from rsi_common.world import finalize_world, validate_world
from rsi_worker.jobs.worldfile import export_lines
from tests.adversarial import attacks
from tests.adversarial.boundary_support import (
    assert_clean_message,
    bclient,
    golden_turn,
    has_bad_chars,
    nested,
    nested_dict,
    row_counts,
    set_path,
    stored_world,
    world_for,
)
from tests.unit.kernel.helpers import NO_RETRY, make_plan, no_sleep

__all__ = ["bclient"]

pytestmark = pytest.mark.timeout(120)
UNICODE = attacks.section("unicode")
CONTENT_PATHS = (
    "input",
    "state.messages[0].content",
    "state.metadata.locale",
    "plan.system_parts[1][1]",
    "plan.turn_notes[0]",
    "tools.calls[0].content",
    "tools.calls[0].input.sql",
    "tools.defs[0].description",
    "memory.chunks[0].content",
    "outcome.final_text",
    "outcome.transcript[0].content",
)


def _chars_ok(value: Any) -> bool:
    return not has_bad_chars(json.dumps(value, ensure_ascii=False))


# --- Unicode in world content: repaired and listed -------------------------------------------------


@pytest.mark.parametrize("entry", UNICODE, ids=[e["name"] for e in UNICODE])
@pytest.mark.parametrize("path", CONTENT_PATHS)
def test_bad_characters_in_content_are_replaced_and_listed(entry: dict[str, Any], path: str) -> None:
    text = entry["text"]
    out = finalize_world(set_path(golden_turn(), path, f"head {text} tail"))
    json.dumps(out, ensure_ascii=False).encode("utf-8")  # storable and exportable as UTF-8
    assert _chars_ok(out)
    surrogate = any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    expected = {(path, kind) for kind, bad in (("lone_surrogate", surrogate), ("nul", "\x00" in text)) if bad}
    assert {(d["path"], d["defect"]) for d in out.get("defects", [])} == expected
    if not expected:  # valid scalar values (noncharacters, bidi, zero-width) are stored as given
        assert "defects" not in out and json.dumps(out, ensure_ascii=False).count(text) >= 1
    assert finalize_world(out) == out  # idempotent: no new defect on a second pass
    assert validate_world(out) == out


def test_defects_are_capped_and_merged() -> None:
    turn = golden_turn()
    turn["state"]["metadata"] = {f"k{i}": "\ud800" for i in range(80)}
    out = finalize_world(turn)
    assert len(out["defects"]) == 50 and all(v == REPLACEMENT_CHAR for v in out["state"]["metadata"].values())
    again = finalize_world(dict(out, input="x\x00"))
    assert again["defects"] == out["defects"]  # the list is full: later repairs are made, not listed
    assert again["input"] == "x" + REPLACEMENT_CHAR


@pytest.mark.parametrize("where", ["state.metadata", "tools.calls[0].input", "state.messages[1].content[0]"])
@pytest.mark.parametrize("key", ["\ud800", "a\x00b", "x\udfffy"])
def test_bad_dict_keys_are_refused_without_a_crash(where: str, key: str) -> None:
    turn = golden_turn()
    parent = turn
    for part in where.replace("]", "").replace("[", ".").split("."):
        parent = parent[int(part)] if part.isdigit() else parent[part]
    parent[key] = "value"
    with pytest.raises(WorldLimitError) as info:
        finalize_world(turn)
    msg = assert_clean_message(info.value, key)
    assert msg.startswith(where + ".<key ") and "keys are refused" in msg


def test_world_ids_with_bad_characters_are_refused() -> None:
    for field in ("io_id", "interaction_id", "agent_id"):
        for text in ("a\ud800", "a\x00", "a b"):
            with pytest.raises(WorldLimitError, match=rf"^{field}: not a valid id"):
                finalize_world(golden_turn(**{field: text}))
    with pytest.raises(WorldLimitError, match=r"^state\.session_id: not a valid id"):
        finalize_world(set_path(golden_turn(), "state.session_id", "s\x00"))
    with pytest.raises(WorldLimitError, match=r"^model: contains a control character"):
        finalize_world(golden_turn(model="m\ud800"))


# --- signals: refused ------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", UNICODE, ids=[e["name"] for e in UNICODE])
@pytest.mark.parametrize("key", ["expected", "comment", "issue", "criteria"])
def test_signals_refuse_bad_characters(entry: dict[str, Any], key: str) -> None:
    text = entry["text"]
    value: Any = ["fine", text] if key == "criteria" else text
    if not has_bad_chars(text):
        assert check_signals({key: value})[key] == value
        return
    with pytest.raises(InputLimitError) as info:
        check_signals({key: value})
    msg = assert_clean_message(info.value, text)
    assert msg.startswith(f"signals.{key}") and ("surrogate" in msg or "U+0000" in msg)


@pytest.mark.parametrize("key", ["\ud800", "comm\x00ent", "x" * 200])
def test_unknown_signal_keys_never_echo(key: str) -> None:
    with pytest.raises(InvalidInput) as info:
        check_signals({key: "x"})
    assert assert_clean_message(info.value, key).startswith("signals.<key 0>: unknown signal")


def test_a_bad_signal_stores_nothing_and_the_agent_still_records(bclient: RsiClient, engine: Engine) -> None:
    bclient.record_turn("agent-1", {"world": world_for("turn-1")})
    before = row_counts(engine)
    with pytest.raises(InputLimitError, match=r"^signals\.comment: contains a lone surrogate"):
        bclient.record_signals("agent-1", "turn-1", {"comment": "bad \ud800", "stars": 2})
    assert row_counts(engine) == before
    bclient.record_signals("agent-1", "turn-1", {"comment": "fine", "stars": 2})
    later = bclient.record_turn("agent-1", {"world": world_for("turn-2", input="next \ud800 turn")})
    assert later.world_id is not None and later.replayable
    lines = list(_export(bclient, "agent-1"))
    assert len(lines) == 2 and all(line.encode("utf-8") for line in lines)


def _export(client: RsiClient, agent: str) -> list[str]:
    from rsi_common.db import session_factory

    with session_factory(client.engine)() as s:
        return list(export_lines(s, agent))


def test_content_repairs_are_stored_identically(bclient: RsiClient, engine: Engine) -> None:
    world = world_for("turn-8812", input="q \ud800 \x00 end")
    set_path(world, "tools.calls[0].content", "rows \udfff")
    rec = bclient.record_turn("agent-1", {"world": world})
    assert rec.replayable
    stored = stored_world(engine, "agent-1", "turn-8812")
    assert stored["input"] == f"q {REPLACEMENT_CHAR} {REPLACEMENT_CHAR} end"
    assert stored["tools"]["calls"][0]["content"] == "rows " + REPLACEMENT_CHAR
    assert {(d["path"], d["defect"]) for d in stored["defects"]} == {
        ("input", "lone_surrogate"), ("input", "nul"), ("tools.calls[0].content", "lone_surrogate")}


# --- the kernel: a tool result with a bad character never makes run_turn raise -------------------


@pytest.mark.parametrize("result", ["bad \ud800 result", "nul \x00 result",
                                    [{"type": "text", "text": "block \udc00"}]])
def test_run_turn_captures_a_repaired_world(result: Any) -> None:
    tools = [ToolDef("lookup", "Look something up.", executor=lambda inp: result)]
    model = ScriptedModel([tool_response("lookup", {"q": "x"}), text_response("the answer")])
    out = run_turn(make_plan(input="use lookup", tools=tools), None, model, retry=NO_RETRY, sleep=no_sleep)
    assert out.answer == "the answer" and out.world is not None
    assert _chars_ok(out.world) and out.world["defects"][0]["path"].startswith("tools.calls[0].content")
    # a lone surrogate is repaired by the tool runner before the model sees it (the transcript holds
    # U+FFFD already); a NUL reaches the model and is repaired in the capture, transcript included
    if "\x00" in json.dumps(result):
        assert any(d["path"].startswith("outcome.transcript") for d in out.world["defects"])


def test_client_run_turn_records_the_repaired_world(bclient: RsiClient, engine: Engine) -> None:
    tools = [ToolDef("lookup", "Look something up.", executor=lambda inp: "x\ud800")]
    model = ScriptedModel([tool_response("lookup", {}), text_response("done")])
    plan = make_plan(input="use lookup", tools=tools, agent_id="", io_id="turn-9", credentials=None)
    result = bclient.run_turn("agent-1", plan, model)
    assert result.answer == "done"
    stored = stored_world(engine, "agent-1", "turn-9")
    assert stored["tools"]["calls"][0]["content"] == "x" + REPLACEMENT_CHAR


@pytest.mark.parametrize("levels", [300, 100_000])
def test_run_turn_with_deep_host_values_refuses_only_the_world(levels: int) -> None:
    model = ScriptedModel([text_response("still answered")])
    plan = make_plan(input="hi", metadata={"deep": nested(levels)}, tools=[])
    out = run_turn(plan, None, model, retry=NO_RETRY, sleep=no_sleep)
    assert out.answer == "still answered" and out.world is None
    assert any(e["type"] == "world.refused" and e["error"] == "WorldLimitError" for e in out.events)


def test_run_turn_with_a_deep_tool_result_refuses_only_the_world() -> None:
    deep = [{"type": "text", "text": "ok", "extra": nested_dict(300)}]
    tools = [ToolDef("lookup", "Look something up.", executor=lambda inp: deep)]
    model = ScriptedModel([tool_response("lookup", {}), text_response("done")])
    out = run_turn(make_plan(input="use lookup", tools=tools), None, model, retry=NO_RETRY, sleep=no_sleep)
    assert out.answer == "done" and out.world is None


# --- nesting: the project's error naming the path and the limit --------------------------------------


DEPTHS = [65, 300, 100_000]


@pytest.mark.parametrize("levels", DEPTHS)
@pytest.mark.parametrize("path", ["input", "state.metadata.deep", "tools.calls[0].input.deep",
                                  "outcome.transcript[0].content"])
def test_deep_worlds_name_the_path_and_the_limit(levels: int, path: str) -> None:
    turn = set_path(golden_turn(), path, nested(levels))
    for call in (finalize_world, validate_world,
                 lambda t: parse_turn("agent-sales-analyst", {"world": t}, record_world=True)):
        with pytest.raises(WorldLimitError) as info:
            call(turn)
        msg = assert_clean_message(info.value)
        assert msg.startswith(path.split("[")[0].split(".")[0]) and f"deeper than {MAX_DEPTH} levels" in msg


@pytest.mark.parametrize("levels", DEPTHS)
def test_deep_signals_trajectories_and_manifests_are_refused(levels: int) -> None:
    with pytest.raises(InvalidInput, match=r"^signals\.expected: must be a string"):
        check_signals({"expected": nested(levels)})
    with pytest.raises(InputLimitError, match=r"^trajectory\.steps.*deeper than 64 levels"):
        parse_turn("agent-1", {"io_id": "turn-1", "trajectory": {"steps": nested(levels)}}, record_world=True)
    base = h0()
    manifest = base.manifest.to_json()
    manifest["components"][0]["params"] = {"deep": nested(levels)}
    with pytest.raises(InputLimitError, match=r"^manifest\.components\[0\]\.params\.deep.*deeper than 64"):
        build_harness(manifest, base.files)
    payload = {"manifest": manifest, "files": dict(base.files), "version": base.version}
    with pytest.raises(InputLimitError, match="deeper than 64 levels"):
        materialize(payload)


def test_depth_limit_is_exact_and_cycles_are_refused() -> None:
    check_depth(nested(MAX_DEPTH), "v")
    scan(nested(MAX_DEPTH), "v", max_bytes=10_000)
    with pytest.raises(InputLimitError, match=r"^v(\[0\])+.*(\[0\])+: nested deeper than 64 levels"):
        check_depth(nested(MAX_DEPTH + 1), "v")
    with pytest.raises(InputLimitError, match="deeper than 64 levels"):
        scan(nested(MAX_DEPTH + 1), "v", max_bytes=10_000)
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(InputLimitError):
        check_depth(cycle, "v")
    world = golden_turn()
    world["state"]["metadata"]["deep"] = nested(MAX_DEPTH - 3)  # metadata is level 3: 64 in all
    assert finalize_world(world)["state"]["metadata"]["deep"] == nested(MAX_DEPTH - 3)
    world["state"]["metadata"]["deep"] = nested(MAX_DEPTH - 2)
    with pytest.raises(WorldLimitError):
        finalize_world(world)


# --- the text depth scan: exact on valid JSON, linear on hostile text ------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\[]{}', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='k"\\[{', max_size=3), inner,
                                                                 max_size=3),
    max_leaves=30,
)


def _depth(v: Any) -> int:
    if isinstance(v, list):
        return 1 + max((_depth(i) for i in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_depth(i) for i in v.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_text_depth_is_exact_on_valid_json(value: Any) -> None:
    assert json_text_depth(json.dumps(value)) == _depth(value)


@pytest.mark.parametrize("text", ['"' + '\\"' * 1_000_000, '"' * 2_000_001, "[" * 2_000_000,
                                  '["' + "\\\\" * 1_000_000])
def test_text_depth_is_linear_on_hostile_text(text: str) -> None:
    start = time.monotonic()
    json_text_depth(text)
    assert time.monotonic() - start < 60.0  # a complexity guard: linear is ~0.1 s, quadratic hours


# --- fuzz: the entry points raise only the project's errors ---------------------------------------

_hostile_text = st.text(st.characters(codec=None, categories=None), max_size=12) | st.sampled_from(
    [e["text"] for e in UNICODE])
_hostile_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True) | _hostile_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_hostile_text, inner, max_size=3),
    max_leaves=12,
)
_world_paths = st.sampled_from((*CONTENT_PATHS, "io_id", "interaction_id", "agent_id", "model", "provider",
                                "outcome.policy_tokens", "outcome.steps", "clock", "state.session_id",
                                "plan.name", "plan.kwargs.temperature"))


@settings(max_examples=150, deadline=None)
@given(path=_world_paths, value=_hostile_json, signals=st.dictionaries(
    st.sampled_from(["expected", "comment", "issue", "criteria", "stars", "implicit", "x\ud800"]),
    _hostile_json, max_size=3))
def test_parse_turn_raises_only_project_errors(path: str, value: Any, signals: dict[str, Any]) -> None:
    turn = {"world": set_path(golden_turn(agent_id=""), path, value), "signals": signals}
    try:
        parsed = parse_turn("agent-1", turn, record_world=True)
    except RsiError as exc:
        assert_clean_message(exc)
        return
    assert parsed.world is not None and _chars_ok(parsed.world) and _chars_ok(parsed.signals)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_hostile_text | st.sampled_from(["expected", "comment", "criteria", "stars"]),
                       _hostile_json, max_size=4))
def test_check_signals_raises_only_project_errors(signals: dict[str, Any]) -> None:
    try:
        clean = check_signals(signals)
    except RsiError as exc:
        assert_clean_message(exc)
        return
    assert _chars_ok(clean)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=_world_paths, value=_hostile_json, n=st.integers(0, 10**9))
def test_record_turn_fuzz_never_stores_a_refused_turn(bclient: RsiClient, engine: Engine, path: str,
                                                     value: Any, n: int) -> None:
    before = row_counts(engine)
    world = set_path(world_for(f"turn-{n}"), path, value)
    try:
        rec = bclient.record_turn("agent-1", {"world": world, "signals": {"comment": "ok"}})
    except RsiError as exc:
        assert_clean_message(exc)
        assert row_counts(engine) == before  # never a partial store
        return
    after = row_counts(engine)
    assert after["rsi_worlds"] <= before["rsi_worlds"] + 1
    if rec.world_id is not None:
        assert _chars_ok(stored_world(engine, "agent-1", rec.io_id))


def test_world_error_classes() -> None:
    """A boundary refusal inside a world is caught wherever a bad world is (``except WorldError``)."""
    assert issubclass(WorldLimitError, WorldError) and issubclass(WorldLimitError, InputLimitError)


def test_deep_harness_files_are_refused_before_parsing(tmp_path: Any) -> None:
    from rsi_common.errors import ManifestLimitError
    from rsi_common.harness import load_checkpoint, load_dir

    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ManifestLimitError, match=r"^checkpoint: nested deeper than 64 levels"):
        load_checkpoint(deep)
    (tmp_path / "manifest.json").write_text('{"schema": ' + deep + "}", encoding="utf-8")
    with pytest.raises(ManifestLimitError, match=r"^manifest\.json: nested deeper than 64 levels"):
        load_dir(tmp_path)


@settings(max_examples=150, deadline=None)
@given(key=_hostile_text | st.sampled_from(["name", "description", "locked", "parent", "components"]),
       value=_hostile_json, where=st.sampled_from(["manifest", "component", "params"]))
def test_manifest_fuzz_raises_only_project_errors(key: str, value: Any, where: str) -> None:
    base = h0()
    manifest = base.manifest.to_json()
    target = {"manifest": manifest, "component": manifest["components"][0],
              "params": manifest["components"][0].setdefault("params", {})}[where]
    target[key] = value
    try:
        build_harness(manifest, base.files)
    except RsiError as exc:
        assert_clean_message(exc)
