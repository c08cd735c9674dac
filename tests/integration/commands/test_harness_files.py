"""``rsi harness export / import``: a learned version travels as a checkpoint file to another agent;
a hostile file (tampered, locked address, platform field, privilege raise, credential, path
traversal, oversized) is refused with a reason naming what is wrong, nothing is stored, and no
secret is echoed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rsi_common.harness import h0
from rsi_common.harness.checkpoint import checkpoint_json, load_checkpoint
from rsi_common.harness.payload import build_harness
from tests.integration.commands.conftest import Cli, corrected
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(60)

AWS_KEY = "AKIA" + "ABCDEFGHIJKLMNOP"  # shaped like a key, built here so no fixture holds one


def _h0_manifest() -> dict[str, Any]:
    return copy.deepcopy(h0().manifest.to_json(include_parent=False))


def _component(manifest: dict[str, Any], cid: str) -> dict[str, Any]:
    return next(c for c in manifest["components"] if c["id"] == cid)


def _checkpoint(tmp_path: Path, manifest: dict[str, Any], files: dict[str, str] | None = None,
                name: str = "c.json", lineage: Any = None) -> Path:
    path = tmp_path / name
    path.write_text(checkpoint_json(build_harness(manifest, files or {}), lineage=lineage, parent=""),
                    encoding="utf-8")
    return path


def _versions(cli: Cli, agent: str) -> list[str]:
    result = cli("lineage", agent, "--json")
    if result.exit_code != 0:
        return []
    return [v["version"] for v in json.loads(result.stdout)["versions"]]


def test_a_learned_version_travels_to_another_agent(cli: Cli, stack: Stack, tmp_path: Path) -> None:
    corrected(stack, "shop")
    version = stack.consolidate("shop").version
    assert version is not None

    exported = cli.json("harness", "export", "shop", "--out", str(tmp_path / "out"))
    path = Path(exported["path"])
    assert path.name == version.replace(":", "-") + ".json"
    checkpoint = load_checkpoint(path.read_text(encoding="utf-8"))
    assert checkpoint.harness.version == version and checkpoint.parent == ""
    assert checkpoint.lineage[0]["summary"] is not None  # the provenance travels with the file

    stored = cli.json("harness", "import", "shop-copy", str(path))
    assert (stored["version"], stored["parent"], stored["adopted"]) == (version, None, False)
    assert stack.current_version("shop-copy") is None  # stored, not current
    assert cli.json("harness", "import", "shop-copy", str(path), "--adopt")["adopted"] is True
    assert stack.current_version("shop-copy") == version
    (row,) = cli.json("lineage", "shop-copy")["versions"]
    assert row["summary"]["source"] == "import" and row["run_id"] is None

    h0_file = Path(cli.json("harness", "export", "shop", "h0", "--out", str(tmp_path))["path"])
    assert load_checkpoint(h0_file.read_bytes()).harness.version == h0().version


def _hostile_cases(tmp_path: Path) -> list[tuple[str, Path, str]]:
    """(what, checkpoint file, a text the refusal names)."""
    locked = _h0_manifest()
    _component(locked, "control.standard")["params"]["max_iterations"] = 500
    unlocked = _h0_manifest()
    unlocked["locked"] = []
    raised = _h0_manifest()
    _component(raised, "control.standard")["params"]["turn_budget_hard"] = 9_000_000
    secret = _h0_manifest()
    _component(secret, "prompt.system")["params"]["extra_blocks"] = [f"Sign requests with {AWS_KEY}."]
    tampered = _checkpoint(tmp_path, _h0_manifest(), name="tampered.json")
    obj = json.loads(tampered.read_text(encoding="utf-8"))
    obj["manifest"]["description"] = "changed after export"
    tampered.write_text(json.dumps(obj), encoding="utf-8")
    escape = _checkpoint(tmp_path, _h0_manifest(), name="escape.json")
    obj = json.loads(escape.read_text(encoding="utf-8"))
    obj["files"] = {"../outside.md": "x"}
    _component(obj["manifest"], "prompt.system")["files"] = ["../outside.md"]
    escape.write_text(json.dumps(obj), encoding="utf-8")
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * 40_000_000)
    return [
        ("locked param", _checkpoint(tmp_path, locked, name="locked.json"), "max_iterations"),
        ("platform field", _checkpoint(tmp_path, unlocked, name="unlocked.json"), "locked"),
        ("privilege raise", _checkpoint(tmp_path, raised, name="raised.json"), "turn_budget_hard"),
        ("credential", _checkpoint(tmp_path, secret, name="secret.json"), "precheck: aws key"),
        ("lineage credential", _checkpoint(tmp_path, _h0_manifest(), name="lineage.json",
                                           lineage=[{"note": AWS_KEY}]), "lineage[0].note"),
        ("tampered", tampered, "version"),
        ("path traversal", escape, "outside.md"),
        ("oversized", huge, "limit"),
        ("not a checkpoint", _write(tmp_path / "plain.json", '{"format": "other"}'),
         "not a harness checkpoint"),
    ]


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_hostile_checkpoints_are_refused_and_nothing_is_stored(cli: Cli, tmp_path: Path) -> None:
    for what, path, named in _hostile_cases(tmp_path):
        result = cli("harness", "import", "target", str(path), "--adopt")
        assert result.exit_code == 1, (what, result.stdout, result.stderr)
        assert named in result.stderr, (what, result.stderr)
        assert AWS_KEY not in result.stderr + result.stdout, what
        assert _versions(cli, "target") == [], what
        assert cli("lineage", "target").exit_code == 1, what  # not even created
