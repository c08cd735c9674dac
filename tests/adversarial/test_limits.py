"""Issue class 6: a documented size limit per stored field, bounded numbers.

Over a limit → the project's error naming the field path and the limit, never the value; nothing
stored. The limits come from ``attacks.json`` (section ``limits``) and docs/security/input-boundary.md.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from rsi_common.boundary import (
    MAX_COMMENT_BYTES,
    MAX_CRITERIA,
    MAX_CRITERION_BYTES,
    MAX_EXPECTED_BYTES,
    MAX_HARNESS_FILE_BYTES,
    MAX_INPUT_BYTES,
    MAX_ISSUE_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_SAFE_INT,
    MAX_STORED_WORLD_BYTES,
    MAX_TRAJECTORY_BYTES,
    check_text,
    scan,
)
from rsi_common.client import RsiClient
from rsi_common.errors import InputLimitError, ManifestError, WorldLimitError
from rsi_common.harness import build_harness, h0, materialize
from rsi_common.harness.addresses import with_param
from rsi_common.host_input import check_signals, parse_turn
from rsi_common.world import MAX_WORLD_BYTES, finalize_world, world_bytes
from tests.adversarial import attacks
from tests.adversarial.boundary_support import (
    assert_clean_message,
    bclient,
    golden_turn,
    row_counts,
    set_path,
    world_for,
)
from tests.unit.harness.helpers import SKILL_PATH, SKILL_TEXT, with_skill

__all__ = ["bclient"]

pytestmark = pytest.mark.timeout(120)
LIMITS = attacks.section("limits")
MARK = "SeCrEtMaRk"


def _filler(n: int) -> str:
    """``n`` ASCII characters that contain the marker a message must never show."""
    return (MARK * (n // len(MARK) + 1))[:n]


@pytest.mark.parametrize("entry", LIMITS, ids=[e["name"] for e in LIMITS])
def test_each_world_field_has_its_limit(entry: dict[str, Any]) -> None:
    turn = set_path(golden_turn(), entry["field"], _filler(entry["bytes"]))
    start = time.monotonic()
    with pytest.raises(WorldLimitError) as info:
        finalize_world(turn)
    assert time.monotonic() - start < 60.0  # a 100 MB string is refused by its length, not walked
    msg = assert_clean_message(info.value, MARK)
    assert msg == f"{entry['field']}: over the size limit of {entry['limit']}"


@pytest.mark.parametrize("entry", LIMITS[1:], ids=[e["name"] for e in LIMITS[1:]])
def test_just_under_each_limit_is_kept(entry: dict[str, Any]) -> None:
    size = 200_000 if entry["bytes"] > 1_000_000 else entry["bytes"] // 2
    out = finalize_world(set_path(golden_turn(), entry["field"], _filler(size)))
    assert out["bytes"] == world_bytes(out)


def test_a_world_between_2_mb_and_the_hard_limits_is_kept_unreplayable() -> None:
    out = finalize_world(golden_turn(input=_filler(3_000_000)))
    assert out["replayable"] is False and out["state"]["messages"] == []
    assert MAX_WORLD_BYTES < out["bytes"] < MAX_STORED_WORLD_BYTES and len(out["input"]) == 3_000_000


def test_a_world_above_the_stored_limit_after_emptying_is_refused() -> None:
    turn = golden_turn(input=_filler(MAX_INPUT_BYTES - 100))
    turn["outcome"]["final_text"] = _filler(MAX_INPUT_BYTES - 100)
    turn["plan"]["system_parts"] = [["role", _filler(900_000)]]
    with pytest.raises(WorldLimitError) as info:
        finalize_world(turn)
    msg = assert_clean_message(info.value, MARK)
    assert msg.startswith("<world>: ") and "stored-world limit of 8,000,000 bytes" in msg


def test_the_capture_limit_bounds_many_large_messages() -> None:
    turn = golden_turn()
    turn["state"]["messages"] = [{"role": "user", "content": _filler(3_900_000)} for _ in range(17)]
    with pytest.raises(WorldLimitError, match=r"^state\.messages\[16\]: the world is over the capture limit"):
        finalize_world(turn)


def test_a_100_mb_input_stores_nothing(bclient: RsiClient, engine: Engine) -> None:
    before = row_counts(engine)
    with pytest.raises(WorldLimitError, match=r"^input: over the size limit of 4,000,000 bytes$"):
        bclient.record_turn("agent-1", {"world": world_for("turn-1", input=_filler(100_000_000))})
    assert row_counts(engine) == before


# --- numbers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["outcome.policy_tokens", "outcome.steps", "plan.context_window_budget",
                                  "plan.max_tokens", "tools.calls[0].input.limit", "state.metadata.n",
                                  "plan.kwargs.max_iterations"])
@pytest.mark.parametrize("value", [2**70, -(2**70), MAX_SAFE_INT + 1, 10**5000],
                         ids=["2**70", "-2**70", "2**53", "10**5000"])
def test_world_integers_are_bounded(path: str, value: int) -> None:
    with pytest.raises(WorldLimitError) as info:
        finalize_world(set_path(golden_turn(), path, value))
    assert assert_clean_message(info.value, "1180591620717").startswith(f"{path}: integer outside ±")


def test_the_largest_safe_integer_is_kept() -> None:
    out = finalize_world(set_path(golden_turn(), "outcome.policy_tokens", MAX_SAFE_INT))
    assert out["outcome"]["policy_tokens"] == MAX_SAFE_INT


def _trajectory(**fields: Any) -> dict[str, Any]:
    return {"io_id": "turn-1", "trajectory": {"status": "ok", "steps": {"model_calls": 1}, **fields}}


@pytest.mark.parametrize(("fields", "message"), [
    ({"policy_tokens": 2**70}, r"^trajectory\.policy_tokens: integer outside"),
    ({"policy_tokens": 2**31}, r"^trajectory\.policy_tokens: must be an integer from -2,147,483,648 "),
    ({"world_bytes": -(2**40)}, r"^trajectory\.world_bytes: must be an integer from"),
    ({"final_text_chars": 1.5}, r"^trajectory\.final_text_chars: must be an integer, got float"),
    ({"steps": {"model_calls": 2**60}}, r"^trajectory\.steps\.model_calls: integer outside"),
    ({"usage_by_purpose": {"x": float("inf")}}, r"^trajectory\.usage_by_purpose\.x: is not a finite"),
    ({"model": "m" * 256}, r"^trajectory\.model: longer than 255 characters"),
    ({"status": "s\x00"}, r"^trajectory\.status: contains U\+0000"),
    ({"status": "s\x01"}, r"^trajectory\.status: contains a control character"),
    ({"trajectory_id": "t" * 65}, r"^trajectory\.trajectory_id: not a valid id: 1 to 64"),
    ({"interaction_id": "c 1"}, r"^trajectory\.interaction_id: not a valid id"),
    ({"params_read": [_filler(MAX_TRAJECTORY_BYTES)]},
     r"^trajectory\.params_read\[0\]: over the size limit of 256,000 bytes$"),
])
def test_trajectory_fields_are_bounded(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InputLimitError, match=message) as info:
        parse_turn("agent-1", _trajectory(**fields), record_world=True)
    assert_clean_message(info.value, MARK)


def test_trajectory_error_is_free_text_cut_to_its_column() -> None:
    parsed = parse_turn("agent-1", _trajectory(error="line one\nline two " + "e" * 500), record_world=True)
    assert parsed.trajectory is not None and parsed.trajectory["error"].startswith("line one\n")
    with pytest.raises(InputLimitError, match=r"^trajectory\.error: contains U\+0000"):
        parse_turn("agent-1", _trajectory(error="boom \x00"), record_world=True)


def test_a_refused_trajectory_stores_nothing(bclient: RsiClient, engine: Engine) -> None:
    before = row_counts(engine)
    with pytest.raises(InputLimitError, match=r"^trajectory\.policy_tokens"):
        bclient.record_turn("agent-1", {"world": world_for("turn-1"), **{
            "trajectory": {"policy_tokens": 2**70}}})
    assert row_counts(engine) == before


# --- signals --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "limit"), [("expected", MAX_EXPECTED_BYTES), ("comment", MAX_COMMENT_BYTES),
                                            ("issue", MAX_ISSUE_BYTES)])
def test_signal_texts_are_bounded(key: str, limit: int) -> None:
    assert check_signals({key: _filler(limit)})[key] == _filler(limit)
    with pytest.raises(InputLimitError) as info:
        check_signals({key: _filler(limit + 1)})
    assert assert_clean_message(info.value, MARK) == f"signals.{key}: over the size limit of {limit:,} bytes"
    multibyte = "é" * (limit // 2 + 1)  # UTF-8 bytes count, not characters
    with pytest.raises(InputLimitError):
        check_signals({key: multibyte})


def test_criteria_are_bounded_in_size_and_number() -> None:
    ok = [_filler(MAX_CRITERION_BYTES)] * MAX_CRITERIA
    assert check_signals({"criteria": ok})["criteria"] == ok
    with pytest.raises(InputLimitError, match=r"^signals\.criteria\[3\]: over the size limit of 2,000 bytes"):
        check_signals({"criteria": ["a", "b", "c", _filler(MAX_CRITERION_BYTES + 1)]})
    with pytest.raises(InputLimitError, match=r"^signals\.criteria: more than 50 criteria"):
        check_signals({"criteria": ["a"] * (MAX_CRITERIA + 1)})


def test_an_oversized_signal_leaves_the_stored_signals(bclient: RsiClient, engine: Engine) -> None:
    bclient.record_turn("agent-1", {"world": world_for("turn-1"), "signals": {"comment": "first"}})
    before = row_counts(engine)
    with pytest.raises(InputLimitError):
        bclient.record_signals("agent-1", "turn-1", {"stars": 1, "comment": _filler(MAX_COMMENT_BYTES + 1)})
    assert row_counts(engine) == before
    from rsi_common.db import session_factory, world_by_io

    with session_factory(engine)() as s:
        row = world_by_io(s, "agent-1", "turn-1")
        assert row is not None and row.signals == {"comment": "first"}


# --- harness manifests and files ------------------------------------------------------------------


def _manifest() -> dict[str, Any]:
    return h0().manifest.to_json()


def test_numeric_params_are_bounded() -> None:
    base = h0()
    comp = base.manifest.components[0].id
    for value in (2**70, -(2**70), MAX_SAFE_INT + 1):
        with pytest.raises(ManifestError) as info:
            with_param(base.manifest, f"{comp}.params.budget", value)
        assert isinstance(info.value, InputLimitError)
        assert str(info.value).startswith("manifest.components[0].params.budget: ")
    manifest = _manifest()
    manifest["components"][0]["params"] = {"policy_tokens": 2**70}
    payload = {"manifest": manifest, "files": dict(base.files), "version": base.version}
    with pytest.raises(ManifestError, match=r"^manifest\.components\[0\]\.params\.policy_tokens: integer"):
        materialize(payload)


def test_manifest_and_file_sizes_are_bounded() -> None:
    base = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})
    manifest = _manifest()
    manifest["description"] = _filler(MAX_MANIFEST_BYTES)
    with pytest.raises(ManifestError, match=r"^manifest\.description: over the size limit of 256,000 bytes$"):
        build_harness(manifest, base.files)
    with pytest.raises(ManifestError) as info:
        build_harness(with_skill(), {SKILL_PATH: _filler(MAX_HARNESS_FILE_BYTES + 1)})
    msg = assert_clean_message(info.value, MARK)
    assert msg == f"files.{SKILL_PATH}: over the size limit of 256,000 bytes"
    assert build_harness(with_skill(), {SKILL_PATH: _filler(MAX_HARNESS_FILE_BYTES)}).files[SKILL_PATH]
    with pytest.raises(ManifestError, match=r"^files\.skills/cite-sources/SKILL\.md: contains a lone"):
        build_harness(with_skill(), {SKILL_PATH: "text \ud800"})
    manifest = _manifest()
    manifest["name"] = "h\x00"
    with pytest.raises(ManifestError, match=r"^manifest\.name: contains U\+0000"):
        build_harness(manifest, base.files)


def test_scan_measures_close_to_the_serialized_size() -> None:
    world = finalize_world(golden_turn())
    measured = scan(world, "", max_bytes=10**9).bytes
    assert abs(measured - world_bytes(world)) / world_bytes(world) < 0.05
    assert check_text("é" * 10, "t", max_bytes=20) == "é" * 10
    with pytest.raises(InputLimitError):
        check_text("é" * 11, "t", max_bytes=21)
