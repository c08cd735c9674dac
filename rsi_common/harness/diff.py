"""Workspaces and unified diffs of harness trees (docs/algorithm/consolidation.md §3.9, vector
docs/check-vectors.md §9.11).

A workspace is an in-memory file map path → text holding ``manifest.json`` plus every referenced file.
Decision: the workspace manifest omits ``parent`` (provenance is set by whoever adopts the candidate),
so a candidate's diff never shows it and ``harness_from_workspace`` returns a harness without parent.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from rsi_common.errors import ManifestError
from rsi_common.harness.paths import MANIFEST_FILE
from rsi_common.harness.payload import Harness, build_harness
from rsi_common.harness.storage import manifest_text

__all__ = ["diff_trees", "harness_from_workspace", "workspace_of"]


def diff_trees(a: Mapping[str, str], b: Mapping[str, str], prefix: str = "harness") -> str:
    """A git-style unified diff from tree ``a`` to tree ``b`` (docs/algorithm/consolidation.md §3.9).

    For each path of the union, sorted, skipping identical files: ``diff --git a/<prefix>/<p>
    b/<prefix>/<p>``, ``new file mode 100644`` / ``deleted file mode 100644`` when one side is absent,
    then ``difflib.unified_diff`` of the split lines (``lineterm=""``) with ``/dev/null`` for the absent
    side; an empty new or deleted file gets only the ``---``/``+++`` lines. Lines are joined with
    ``"\\n"``; a non-empty diff ends with ``"\\n"``; no change gives ``""``.
    """
    lines: list[str] = []
    for path in sorted(set(a) | set(b)):
        old, new = a.get(path), b.get(path)
        if old == new:
            continue
        left, right = f"a/{prefix}/{path}", f"b/{prefix}/{path}"
        lines.append(f"diff --git {left} {right}")
        if old is None:
            lines.append("new file mode 100644")
        elif new is None:
            lines.append("deleted file mode 100644")
        fromfile = left if old is not None else "/dev/null"
        tofile = right if new is not None else "/dev/null"
        body = list(difflib.unified_diff((old or "").splitlines(), (new or "").splitlines(), fromfile,
                                         tofile, lineterm=""))
        if not body and (old is None or new is None):
            body = [f"--- {fromfile}", f"+++ {tofile}"]
        lines.extend(body)
    return "\n".join(lines) + "\n" if lines else ""


def workspace_of(harness: Harness) -> dict[str, str]:
    """``{"manifest.json": json.dumps(manifest, indent=2, ensure_ascii=False) + "\\n", **files}``."""
    ws = {MANIFEST_FILE: manifest_text(harness, include_parent=False)}
    ws.update(harness.files)
    return ws


def harness_from_workspace(ws: Mapping[str, str]) -> Harness:
    """Build a harness from a workspace; files no component references are ignored.

    Raises:
        ManifestError: no or invalid ``manifest.json``, a rule broken, a referenced file missing.
        PathEscapeError: a path is unsafe.
    """
    obj, files = split_workspace(ws)
    return build_harness(obj, files)


def split_workspace(ws: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(manifest object, other files)`` of a workspace.

    Raises:
        ManifestError: no ``manifest.json``, or it is not a JSON object.
    """
    text = ws.get(MANIFEST_FILE)
    if text is None:
        raise ManifestError(f"the workspace has no {MANIFEST_FILE}")
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"{MANIFEST_FILE} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ManifestError(f"{MANIFEST_FILE} must hold a JSON object")
    return obj, {p: t for p, t in ws.items() if p != MANIFEST_FILE}
