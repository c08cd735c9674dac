"""Sandboxed file tools of a workspace directory (docs/host/agent.md#workspace).

:func:`workspace_tools` gives an agent three tools on one directory, the *root*:

* ``read_file(path)`` — a UTF-8 text file (undecodable bytes as U+FFFD), at most
  :data:`MAX_READ_BYTES` (longer files are cut, and the result says so);
* ``list_files(path=".")`` — the entries of a directory, sorted, directories with a trailing ``/``
  and symbolic links with ``@``, at most :data:`MAX_LIST_ENTRIES`;
* ``write_file(path, content)`` — create or replace a text file (parent directories are created),
  at most :data:`MAX_WRITE_BYTES`.

**The sandbox.** A path is relative to the root. It is refused — an error result naming the rule,
the turn goes on — when it is absolute, holds a NUL character, or resolves outside the root once
``..`` and every symbolic link on the way are followed (so a link inside the root pointing out of it
is refused, like ``../``). The file itself is opened by its resolved path with ``O_NOFOLLOW``, so a
link swapped in after the check is not followed either. The root itself is resolved once, when the
tools are made.
"""

from __future__ import annotations

import os
from pathlib import Path

from rsi_common.errors import InvalidInput
from rsi_common.kernel import ToolDef, ToolResult
from rsi_common.kernel.types import ToolOutput

__all__ = ["MAX_LIST_ENTRIES", "MAX_READ_BYTES", "MAX_WRITE_BYTES", "Sandbox", "workspace_tools"]

MAX_READ_BYTES = 256_000
MAX_WRITE_BYTES = 1_000_000
MAX_LIST_ENTRIES = 500
_STR = {"type": "string"}
_PATH = {"type": "string", "description": "relative to the workspace"}


class SandboxError(Exception):
    """A path the sandbox refuses (the message names the rule, never the file's content)."""


class Sandbox:
    """Resolves paths inside ``root`` (module docstring).

    Raises:
        InvalidInput: ``root`` is not an existing directory.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        resolved = Path(root).resolve()
        if not resolved.is_dir():
            raise InvalidInput("workspace: the directory does not exist")
        self.root = resolved

    def resolve(self, path: object) -> Path:
        """The resolved path of ``path`` inside the root.

        Raises:
            SandboxError: not a string, absolute, a NUL character, or outside the root.
        """
        if not isinstance(path, str) or not path:
            raise SandboxError("path: give a relative path inside the workspace")
        if "\x00" in path:
            raise SandboxError("path: a NUL character is not allowed")
        if os.path.isabs(path) or path.startswith("~"):
            raise SandboxError("path: absolute paths are refused; give a path relative to the workspace")
        resolved = (self.root / path).resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise SandboxError("path: it leads outside the workspace (.. or a symbolic link); refused")
        return resolved

    def shown(self, path: Path) -> str:
        """``path`` relative to the root (``.`` for the root)."""
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    def read(self, path: object) -> str:
        target = self.resolve(path)
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_READ_BYTES + 1)
        text = data[:MAX_READ_BYTES].decode("utf-8", "replace")
        if len(data) > MAX_READ_BYTES:
            text += f"\n[cut: the file is longer than {MAX_READ_BYTES} bytes]"
        return text

    def list(self, path: object = ".") -> str:
        target = self.resolve(path)
        if not target.is_dir():
            raise SandboxError("path: not a directory")
        names = sorted(e.name + ("@" if e.is_symlink() else "/" if e.is_dir() else "")
                       for e in os.scandir(target))
        more = len(names) - MAX_LIST_ENTRIES
        lines = names[:MAX_LIST_ENTRIES] + ([f"[{more} more entries]"] if more > 0 else [])
        return "\n".join(lines) if lines else "(empty directory)"

    def write(self, path: object, content: object) -> str:
        if not isinstance(content, str):
            raise SandboxError("content: must be text")
        data = content.encode("utf-8", "replace")
        if len(data) > MAX_WRITE_BYTES:
            raise SandboxError(f"content: larger than {MAX_WRITE_BYTES} bytes")
        target = self.resolve(path)
        if target == self.root:
            raise SandboxError("path: names the workspace itself")
        target.parent.mkdir(parents=True, exist_ok=True)
        if self.resolve(self.shown(target.parent)) != target.parent:  # a link swapped in meanwhile
            raise SandboxError("path: it leads outside the workspace; refused")
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return f"wrote {len(data)} bytes to {self.shown(target)}"


def _guarded(action: str, run: object) -> ToolOutput:
    try:
        return str(run() if callable(run) else run)
    except SandboxError as exc:
        return ToolResult(f"{action} refused: {exc}", is_error=True)
    except FileNotFoundError:
        return ToolResult(f"{action} failed: no such file or directory", is_error=True)
    except IsADirectoryError:
        return ToolResult(f"{action} failed: a directory, not a file", is_error=True)
    except OSError as exc:  # ELOOP from O_NOFOLLOW, permissions, …
        return ToolResult(f"{action} failed: {type(exc).__name__} ({exc.strerror or 'error'})", is_error=True)


def workspace_tools(root: str | os.PathLike[str]) -> list[ToolDef]:
    """The three file tools of ``root`` (module docstring).

    Raises:
        InvalidInput: ``root`` is not an existing directory.
    """
    box = Sandbox(root)
    path_schema = {"type": "object", "properties": {"path": _PATH}, "required": ["path"]}
    return [
        ToolDef("read_file", "Read a text file of the workspace.", path_schema, read_only=True,
                family="workspace", executor=lambda a: _guarded("read", lambda: box.read(a.get("path")))),
        ToolDef("list_files", "List a directory of the workspace (default: its root).",
                {"type": "object", "properties": {"path": _PATH}},
                read_only=True, family="workspace",
                executor=lambda a: _guarded("list", lambda: box.list(a.get("path", ".")))),
        ToolDef("write_file", "Create or replace a text file of the workspace.",
                {"type": "object", "properties": {"path": _PATH, "content": _STR},
                 "required": ["path", "content"]},
                family="workspace",
                executor=lambda a: _guarded("write", lambda: box.write(a.get("path"), a.get("content")))),
    ]
