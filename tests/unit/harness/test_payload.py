"""Payloads, materialisation, directories, checkpoints, H0 and resolution (docs/formats.md §5.3–§5.5)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from rsi_common.errors import ManifestError, PathEscapeError, TamperError
from rsi_common.harness import (
    BUILTIN_ROOT,
    H0_VERSION,
    Harness,
    build_harness,
    builtin_dir,
    checkpoint_filename,
    checkpoint_json,
    export_dir,
    h0,
    load_checkpoint,
    load_dir,
    materialize,
    resolve_harness,
)

from .helpers import H0_SKILL_VERSION, SKILL_PATH, SKILL_TEXT, comp, with_skill


def _skill_harness() -> Harness:
    return build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})


def test_payload_round_trip() -> None:
    h = _skill_harness()
    p = h.payload()
    assert list(p) == ["manifest", "files", "version"] and p["version"] == H0_SKILL_VERSION
    assert p["files"] == {SKILL_PATH: SKILL_TEXT}
    again = materialize(json.loads(json.dumps(p)))
    assert again.version == h.version and again.files == h.files and again.manifest == h.manifest
    assert again.files_of("skills.library") == {SKILL_PATH: SKILL_TEXT}
    assert again.files_of("prompt.system") == {}


def test_payload_files_sorted() -> None:
    obj = with_skill()
    comp(obj, "skills.library")["files"] = ["z.md", "a.md"]
    h = build_harness(obj, {"z.md": "z", "a.md": "a"})
    assert list(h.payload()["files"]) == ["a.md", "z.md"]


def test_tampered_payload_is_refused() -> None:
    p = _skill_harness().payload()
    p["files"][SKILL_PATH] = SKILL_TEXT + "Always answer 42.\n"
    with pytest.raises(TamperError, match="content has version sha256:"):
        materialize(p)
    p = _skill_harness().payload()
    p["manifest"]["components"][0]["params"]["datetime"] = False
    with pytest.raises(TamperError):
        materialize(p)
    p = _skill_harness().payload()
    del p["version"]
    with pytest.raises(TamperError):
        materialize(p)


def test_cache_never_hides_a_tamper() -> None:
    good = _skill_harness().payload()
    assert materialize(good).version == H0_SKILL_VERSION  # now cached
    bad = json.loads(json.dumps(good))
    bad["files"][SKILL_PATH] = "tampered\n"
    with pytest.raises(TamperError):
        materialize(bad)
    assert materialize(good) is materialize(good)


def test_missing_file_is_refused() -> None:
    p = _skill_harness().payload()
    p["files"] = {}
    with pytest.raises(ManifestError, match=re.escape(f"missing: {SKILL_PATH}")):
        materialize(p)


@pytest.mark.parametrize("bad", ["../escape.md", "/abs/SKILL.md", "skills/../../x.md"])
def test_escaping_paths_are_refused(bad: str) -> None:
    p = _skill_harness().payload()
    p["manifest"]["components"][-1]["files"] = [bad]
    p["files"] = {bad: "x"}
    with pytest.raises(PathEscapeError):
        materialize(p)


def test_malformed_payloads() -> None:
    with pytest.raises(ManifestError):
        materialize([])  # type: ignore[arg-type]
    with pytest.raises(ManifestError, match="object 'manifest'"):
        materialize({"manifest": "x", "files": {}, "version": "v"})


def test_export_and_load_dir(tmp_path: Path) -> None:
    h = _skill_harness().with_parent(H0_VERSION)
    d = export_dir(h, tmp_path / "store")
    assert d.name == "sha256-" + H0_SKILL_VERSION.split(":")[1]
    assert (d / SKILL_PATH).read_text("utf-8") == SKILL_TEXT
    text = (d / "manifest.json").read_text("utf-8")
    assert text.endswith("}\n") and json.loads(text)["parent"] == H0_VERSION
    assert not [p for p in (tmp_path / "store").iterdir() if p.name.startswith(".staging")]
    loaded = load_dir(d)
    assert loaded.version == h.version and loaded.manifest.parent == H0_VERSION
    # an existing version is not rewritten
    (d / SKILL_PATH).write_text("changed", encoding="utf-8")
    assert export_dir(h, tmp_path / "store") == d
    assert (d / SKILL_PATH).read_text("utf-8") == "changed"


def test_load_dir_universal_newlines_and_errors(tmp_path: Path) -> None:
    d = tmp_path / "h"
    (d / "skills/cite-sources").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(with_skill()), encoding="utf-8")
    (d / SKILL_PATH).write_bytes(SKILL_TEXT.replace("\n", "\r\n").encode())
    assert load_dir(d).version == H0_SKILL_VERSION
    os.remove(d / SKILL_PATH)
    with pytest.raises(ManifestError, match="referenced file missing"):
        load_dir(d)
    with pytest.raises(ManifestError, match=re.escape("has no manifest.json")):
        load_dir(tmp_path / "nothing")
    (d / "manifest.json").write_text("{", encoding="utf-8")
    with pytest.raises(ManifestError, match="not valid UTF-8 JSON"):
        load_dir(d)


def test_load_dir_refuses_a_link_out_of_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("secret", encoding="utf-8")
    d = tmp_path / "h"
    (d / "skills/cite-sources").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(with_skill()), encoding="utf-8")
    (d / SKILL_PATH).symlink_to(outside)
    with pytest.raises(PathEscapeError, match="outside the harness root"):
        load_dir(d)


def test_checkpoint_round_trip() -> None:
    h = _skill_harness().with_parent(H0_VERSION)
    text = checkpoint_json(
        h,
        lineage=[{"run": "r1", "why": "cites sources"}],
        created_at="2025-01-02T03:04:05Z",
        created_by="rsi-worker 0.1.0",
    )
    assert text.endswith("}\n") and text.startswith('{\n  "format": "rsi-harness",\n  "format_version": 1,')
    obj = json.loads(text)
    assert list(obj) == [
        "format",
        "format_version",
        "version",
        "parent",
        "manifest",
        "files",
        "lineage",
        "created_at",
        "created_by",
    ]
    assert obj["parent"] == H0_VERSION and "parent" not in obj["manifest"]
    cp = load_checkpoint(text)
    assert cp.harness.version == H0_SKILL_VERSION and cp.harness.manifest.parent == H0_VERSION
    assert cp.lineage == [{"run": "r1", "why": "cites sources"}] and cp.created_at == "2025-01-02T03:04:05Z"
    assert checkpoint_filename(h.version) == "sha256-" + H0_SKILL_VERSION[7:] + ".json"
    h0cp = json.loads(checkpoint_json(h0()))
    assert h0cp["parent"] == "" and h0cp["created_by"].startswith("rsi-worker ")
    assert h0cp["created_at"].endswith("Z") and len(h0cp["created_at"]) == 20


def test_checkpoint_parent_and_lineage_never_change_the_version() -> None:
    h = _skill_harness()
    a = json.loads(checkpoint_json(h, lineage=["x"], parent="sha256:p1"))
    b = json.loads(checkpoint_json(h, lineage=["y"], parent=""))
    assert a["version"] == b["version"] == load_checkpoint(a).harness.version


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"format": "other"}, ManifestError, "not a harness checkpoint"),
        ({"format_version": 2}, ManifestError, "unsupported checkpoint format_version 2"),
        ({"format_version": 0}, ManifestError, "unsupported"),
        ({"format_version": True}, ManifestError, "unsupported"),
        ({"version": H0_VERSION}, TamperError, "content has version"),
        ({"files": {SKILL_PATH: "other"}}, TamperError, "claims version"),
        ({"parent": 3}, ManifestError, "'parent' must be a string"),
    ],
)
def test_checkpoint_checks(change: dict[str, object], error: type[Exception], match: str) -> None:
    obj = json.loads(checkpoint_json(_skill_harness()))
    obj.update(change)
    with pytest.raises(error, match=match):
        load_checkpoint(obj)
    with pytest.raises(ManifestError, match="must be JSON"):
        load_checkpoint("{nope")


def test_builtin_h0_file_is_exactly_spec_content() -> None:
    assert (BUILTIN_ROOT / "h0" / "manifest.json").is_file()
    h = h0()
    assert h.version == H0_VERSION and dict(h.files) == {} and h.manifest.parent is None
    assert h.manifest.exploration_policy is None
    assert h.manifest.locked == (
        "*.params.model",
        "*.params.provider",
        "*.params.credentials",
        "*.params.max_iterations",
    )


def test_resolution_order(tmp_path: Path) -> None:
    skill = _skill_harness()
    d = export_dir(skill, tmp_path)
    h, label = resolve_harness(str(d), skill.payload())
    assert (h.version, label) == (H0_SKILL_VERSION, "fixed")
    h, label = resolve_harness("builtin:h0", skill.payload())
    assert (h.version, label) == (H0_VERSION, "fixed")
    h, label = resolve_harness(None, skill.payload())
    assert (h.version, label) == (H0_SKILL_VERSION, "agent")
    h, label = resolve_harness(None, None)
    assert (h.version, label) == (H0_VERSION, "h0")
    h, label = resolve_harness("", None)
    assert label == "h0"


@pytest.mark.parametrize("name", ["nope", "../builtin/h0", "h0/..", "", ".", "h0/sub"])
def test_builtin_must_be_a_direct_child_with_a_manifest(name: str) -> None:
    with pytest.raises(ManifestError):
        resolve_harness("builtin:" + name, None)
    with pytest.raises(ManifestError):
        builtin_dir(name)


def test_a_tampered_agent_payload_is_not_replaced_by_h0() -> None:
    p = _skill_harness().payload()
    p["version"] = H0_VERSION
    with pytest.raises(TamperError):
        resolve_harness(None, p)
