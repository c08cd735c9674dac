"""Content-addressed versions (docs/formats.md §5.2) and the docs/check-vectors.md §9.11 format vectors."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_common.harness import H0_VERSION, build_harness, canonical_json, h0, load_manifest, version_id
from rsi_common.harness.version import version_stream

from .helpers import H0_SKILL_VERSION, SKILL_PATH, SKILL_TEXT, comp, h0_obj, with_skill


def test_h0_vector() -> None:
    h = h0()
    canon = canonical_json(h.manifest.to_json()).encode("utf-8")
    assert len(canon) == 1758
    assert (
        h.version == H0_VERSION == "sha256:200eb5deca0ae54d38a3429291b7347cdf96c8af29a7390df286b6ee9d5da7cd"
    )
    assert version_stream(h.manifest, {}) == canon


def test_h0_plus_skill_vector() -> None:
    h = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})
    assert h.version == H0_SKILL_VERSION


def test_parent_never_changes_the_version() -> None:
    assert build_harness(dict(h0_obj(), parent="sha256:" + "0" * 64), {}).version == H0_VERSION
    obj = dict(with_skill(), parent=H0_VERSION)
    h = build_harness(obj, {SKILL_PATH: SKILL_TEXT})
    assert h.version == H0_SKILL_VERSION and h.manifest.parent == H0_VERSION
    assert h.with_parent("sha256:x").version == H0_SKILL_VERSION


def test_canonical_json_convention() -> None:
    x = {"b": [1, 2.0, True, None], "a": "é", "c": {"z": 0.8, "y": 10.0}}
    assert canonical_json(x) == '{"a":"é","b":[1,2.0,true,null],"c":{"y":10.0,"z":0.8}}'
    assert canonical_json(30000) == "30000"


def test_any_file_byte_changes_the_version() -> None:
    base = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT}).version
    assert build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT + " "}).version != base
    assert build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT.replace("W", "w")}).version != base


def test_the_path_is_part_of_the_stream() -> None:
    a = with_skill()
    comp(a, "skills.library")["files"] = ["skills/cite/SKILL.md"]
    assert build_harness(a, {"skills/cite/SKILL.md": SKILL_TEXT}).version != H0_SKILL_VERSION


def test_universal_newlines() -> None:
    crlf = SKILL_TEXT.replace("\n", "\r\n")
    h = build_harness(with_skill(), {SKILL_PATH: crlf})
    assert h.version == H0_SKILL_VERSION and h.files[SKILL_PATH] == SKILL_TEXT


def test_any_manifest_change_changes_the_version() -> None:
    obj = h0_obj()
    comp(obj, "control.standard")["params"]["repeat_stop_after"] = 4
    assert build_harness(obj, {}).version != H0_VERSION
    obj = h0_obj()
    comp(obj, "context.standard")["params"]["retrieval_timeout_s"] = 10  # int, not 10.0
    assert build_harness(obj, {}).version != H0_VERSION


def test_unreferenced_files_are_not_part_of_the_harness() -> None:
    h = build_harness(h0_obj(), {"notes.md": "x"})
    assert h.version == H0_VERSION and dict(h.files) == {}


def test_exploration_policy_file_is_hashed() -> None:
    obj = h0_obj()
    obj["exploration_policy"] = {"file": "policy/explore.py", "default_beta": 0.4, "W": 4}
    a = build_harness(obj, {"policy/explore.py": "def choose(view, beta):\n    return []\n"})
    b = build_harness(obj, {"policy/explore.py": "def choose(view, beta):\n    return ['r']\n"})
    assert a.version != b.version
    assert a.manifest.referenced_files() == ("policy/explore.py",)


def _shuffled(x: Any, rng: random.Random) -> Any:
    if isinstance(x, dict):
        items = list(x.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(x, list):
        return [_shuffled(v, rng) for v in x]
    return x


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    extra=st.dictionaries(
        st.text("abcxyz_", min_size=1, max_size=6),
        st.one_of(
            st.integers(-5, 5), st.booleans(),
            st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=5),
            st.lists(st.integers(0, 3), max_size=3),
        ),
        max_size=4,
    ),
)
def test_version_is_deterministic_and_ignores_key_order(seed: int, extra: dict[str, Any]) -> None:
    obj = with_skill()
    comp(obj, "skills.library")["params"] = {"header": "# Skills", "extra": extra}
    files = {SKILL_PATH: SKILL_TEXT}
    expected = build_harness(obj, files).version
    shuffled = _shuffled(json.loads(json.dumps(obj)), random.Random(seed))
    assert build_harness(shuffled, files).version == expected
    assert version_id(load_manifest(shuffled), files) == expected
