"""Edit addresses, addresses_for, locks and with_param (docs/formats.md §5.1)."""

from __future__ import annotations

import re

import pytest

from rsi_common.errors import LockedFieldError, ManifestError
from rsi_common.harness import (
    Address,
    addresses_for,
    build_harness,
    editable_addresses,
    h0,
    is_locked,
    load_manifest,
    parse_address,
    with_param,
)

from .helpers import SKILL_PATH, SKILL_TEXT, comp, h0_obj, with_skill


def test_parse_at_the_first_marker_after_position_zero() -> None:
    assert parse_address("memory.archive.params.archive") == Address("memory.archive", "params", "archive")
    assert parse_address("a.params.b.c").keys == ("b", "c")
    assert parse_address("skills.library.files.skills/x/SKILL.md") == Address(
        "skills.library", "files", "skills/x/SKILL.md"
    )
    # a file path containing ".params." stays a file path: the first marker wins
    assert parse_address("c.files.docs/a.params.b") == Address("c", "files", "docs/a.params.b")
    assert str(parse_address("x.params.y")) == "x.params.y"


@pytest.mark.parametrize("addr", [".params.x", "x.params.", "noaddress", "x.enabled"])
def test_not_addresses(addr: str) -> None:
    with pytest.raises(ManifestError):
        parse_address(addr)


def test_addresses_for_walks_non_empty_dicts_only() -> None:
    obj = with_skill()
    comp(obj, "memory.archive")["params"] = {
        "retrieve": True,
        "nested": {"a": 1, "b": {"c": []}},
        "empty": {},
    }
    m = load_manifest(obj)
    addrs = addresses_for(m)
    assert "prompt.system.params.part_overrides" in addrs  # empty dict: a leaf
    assert "prompt.system.params.part_order" in addrs  # list: a leaf
    assert [a for a in addrs if a.startswith("memory.archive")] == [
        "memory.archive.params.retrieve",
        "memory.archive.params.nested.a",
        "memory.archive.params.nested.b.c",
        "memory.archive.params.empty",
    ]
    assert addrs[-1] == f"skills.library.files.{SKILL_PATH}"
    assert len(addresses_for(h0().manifest)) == 8 + 7 + 4 + 2 + 4 + 2 + 1


def test_is_locked_patterns() -> None:
    locked = h0().manifest.locked
    assert is_locked("control.standard.params.max_iterations", locked)
    assert is_locked("x.params.model", locked)
    assert is_locked("x.params.model.name", locked)  # p + ".*"
    assert not is_locked("x.params.models", locked)
    assert not is_locked("x.params.Model", locked)  # case-sensitive
    assert h0().manifest.is_locked("a.params.credentials")
    assert "control.standard.params.repeat_stop_after" in editable_addresses(h0().manifest)


def test_with_param_sets_and_validates() -> None:
    m = with_param(h0().manifest, "control.standard.params.repeat_stop_after", 5)
    assert m.component("control.standard").params["repeat_stop_after"] == 5
    assert h0().manifest.component("control.standard").params["repeat_stop_after"] == 3  # not mutated
    m2 = with_param(m, "memory.archive.params.policy.window", 3)
    assert m2.component("memory.archive").params["policy"] == {"window": 3}
    h = h0().with_param("output.parse.params.signal_detector", "hybrid")
    assert h.version != h0().version


@pytest.mark.parametrize(
    "addr",
    [
        "control.standard.params.max_iterations",
        "prompt.system.params.model",
        "memory.archive.params.provider",
        "tools.exposure.params.credentials.key",
    ],
)
def test_with_param_refuses_locked_addresses(addr: str) -> None:
    with pytest.raises(LockedFieldError, match="locked"):
        with_param(h0().manifest, addr, "v")


def test_with_param_refuses_smuggling_below_a_locked_address() -> None:
    obj = h0_obj()
    obj["locked"] = ["*.params.limits.hard"]
    m = load_manifest(obj)
    with pytest.raises(LockedFieldError, match=re.escape("memory.archive.params.limits.hard")):
        with_param(m, "memory.archive.params.limits", {"hard": 1})


def test_with_param_errors() -> None:
    m = h0().manifest
    with pytest.raises(ManifestError, match="file address"):
        with_param(m, "memory.archive.files.a.md", "x")
    with pytest.raises(ManifestError, match="no component 'ghost'"):
        with_param(m, "ghost.params.x", 1)
    with pytest.raises(ManifestError, match="holds a bool"):
        with_param(m, "memory.archive.params.retrieve.deep", 1)
    with pytest.raises(ManifestError, match="not a finite JSON number"):
        with_param(m, "memory.archive.params.x", float("inf"))


def test_harness_with_param_keeps_files() -> None:
    h = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})
    h2 = h.with_param("skills.library.params.header", "# Procedures")
    assert h2.files == h.files and h2.manifest.component("skills.library").params == {
        "header": "# Procedures"
    }
