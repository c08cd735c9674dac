"""Harness file-path rules (docs/formats.md §5.1): a referenced path can never leave the harness root."""

from __future__ import annotations

from pathlib import Path

from rsi_common.errors import PathEscapeError

__all__ = ["MANIFEST_FILE", "check_path", "safe_join"]

MANIFEST_FILE = "manifest.json"
"""Name of the manifest inside a harness directory or workspace; never a referenced file."""


def check_path(path: object, *, where: str = "file path") -> str:
    """Return ``path`` if it is a safe relative harness path, else raise.

    A safe path is a non-empty ``str`` that uses ``/`` as separator (no ``\\``), contains no NUL and
    has no empty, ``.`` or ``..`` segment; an absolute path (leading ``/``) has an empty first
    segment and is refused by that rule. A drive prefix (``C:``) in the first segment is refused too
    (project decision: such a path is absolute on Windows).

    Args:
        path: the candidate path.
        where: what the path is, for the message (e.g. ``"component 'x' file"``).

    Raises:
        PathEscapeError: the path is not a string or breaks a rule.
    """
    if not isinstance(path, str) or not path:
        raise PathEscapeError(f"{where} must be a non-empty string, got {path!r}")
    if "\\" in path or "\x00" in path:
        raise PathEscapeError(f"{where} {path!r} must use '/' as separator and contain no NUL")
    segments = path.split("/")
    for seg in segments:
        if seg in ("", ".", ".."):
            shown = "an empty" if seg == "" else f"a {seg!r}"
            raise PathEscapeError(
                f"{where} {path!r} has {shown} segment: paths are relative, use '/', and cannot leave"
                " the harness root"
            )
    if len(segments[0]) >= 2 and segments[0][1] == ":" and segments[0][0].isalpha():
        raise PathEscapeError(f"{where} {path!r} starts with a drive letter")
    return path


def safe_join(root: Path, path: str) -> Path:
    """``root / path`` after :func:`check_path`, refusing anything that resolves outside ``root``.

    Symbolic links are followed when resolving, so a link pointing out of the root is refused too.

    Raises:
        PathEscapeError: the path is unsafe or resolves outside ``root``.
    """
    check_path(path)
    base = root.resolve()
    target = (base / path).resolve()
    if not target.is_relative_to(base):
        raise PathEscapeError(f"file path {path!r} resolves outside the harness root")
    return target
