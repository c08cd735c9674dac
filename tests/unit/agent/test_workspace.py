"""The workspace's file tools stay inside their directory: traversal, absolute paths and symbolic
links that lead out are refused as error results; reads, listings and writes inside work."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from rsi_common.agent.workspace import MAX_READ_BYTES, Sandbox, workspace_tools
from rsi_common.errors import InvalidInput
from rsi_common.kernel import ToolDef, ToolResult


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    (root / "docs").mkdir(parents=True)
    outside.mkdir()
    (root / "docs" / "a.txt").write_text("inside text", encoding="utf-8")
    (outside / "secret.txt").write_text("outside secret", encoding="utf-8")
    os.symlink(outside / "secret.txt", root / "link_out.txt")
    os.symlink(outside, root / "dir_out")
    os.symlink(root / "docs" / "a.txt", root / "link_in.txt")
    return root, outside


def tools(root: Path) -> dict[str, ToolDef]:
    return {t.name: t for t in workspace_tools(root)}


def call(root: Path, name: str, **args: Any) -> Any:
    executor = tools(root)[name].executor
    assert executor is not None
    return executor(args)


def test_reads_lists_and_writes_inside(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert call(root, "read_file", path="docs/a.txt") == "inside text"
    assert call(root, "read_file", path="link_in.txt") == "inside text", "a link that stays inside is fine"
    assert call(root, "list_files") == "dir_out@\ndocs/\nlink_in.txt@\nlink_out.txt@"
    assert call(root, "write_file", path="new/b.txt", content="héllo") == "wrote 6 bytes to new/b.txt"
    assert (root / "new" / "b.txt").read_text(encoding="utf-8") == "héllo"
    assert call(root, "read_file", path="./docs/../new/b.txt") == "héllo"


@pytest.mark.parametrize(("name", "args"), [
    ("read_file", {"path": "../outside/secret.txt"}),
    ("read_file", {"path": "docs/../../outside/secret.txt"}),
    ("read_file", {"path": "link_out.txt"}),
    ("read_file", {"path": "dir_out/secret.txt"}),
    ("list_files", {"path": "dir_out"}),
    ("list_files", {"path": ".."}),
    ("write_file", {"path": "../escape.txt", "content": "x"}),
    ("write_file", {"path": "dir_out/planted.txt", "content": "x"}),
    ("write_file", {"path": "link_out.txt", "content": "overwritten"}),
])
def test_escapes_are_refused(layout: tuple[Path, Path], name: str, args: dict[str, Any]) -> None:
    root, outside = layout
    out = call(root, name, **args)
    assert isinstance(out, ToolResult) and out.is_error
    assert "outside the workspace" in str(out.content)
    assert "outside secret" not in str(out.content)
    assert (outside / "secret.txt").read_text(encoding="utf-8") == "outside secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not (root.parent / "escape.txt").exists()


@pytest.mark.parametrize(("path", "rule"), [
    ("/etc/passwd", "absolute paths are refused"),
    ("~/.ssh/id_rsa", "absolute paths are refused"),
    ("docs/a.txt\x00.png", "NUL character"),
    ("", "give a relative path"),
    (7, "give a relative path"),
])
def test_bad_paths_are_refused(layout: tuple[Path, Path], path: Any, rule: str) -> None:
    out = call(layout[0], "read_file", path=path)
    assert isinstance(out, ToolResult) and out.is_error and rule in str(out.content)


def test_a_link_swapped_in_after_the_check_is_not_followed(layout: tuple[Path, Path],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: the path was checked, then its last component became a link leading out. The file
    is opened with O_NOFOLLOW, so the link is not followed (simulated by a check that passes)."""
    root, outside = layout
    monkeypatch.setattr(Sandbox, "resolve", lambda self, path: root / "link_out.txt")
    for name, args in (("read_file", {"path": "a.txt"}), ("write_file", {"path": "a.txt", "content": "x"})):
        out = call(root, name, **args)
        assert isinstance(out, ToolResult) and out.is_error
        assert "failed: OSError" in str(out.content) or "leads outside" in str(out.content)
    assert (outside / "secret.txt").read_text(encoding="utf-8") == "outside secret"


def test_missing_files_big_files_and_bad_roots(layout: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = layout
    missing = call(root, "read_file", path="nope.txt")
    assert isinstance(missing, ToolResult) and missing.is_error and "no such file" in str(missing.content)
    (root / "big.txt").write_bytes(b"x" * (MAX_READ_BYTES + 10))
    cut = f"[cut: the file is longer than {MAX_READ_BYTES} bytes]"
    assert call(root, "read_file", path="big.txt").endswith(cut)
    with pytest.raises(InvalidInput, match="workspace: the directory does not exist"):
        workspace_tools(tmp_path / "absent")
