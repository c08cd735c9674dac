"""The checkpoint file of ``rsi export`` / ``rsi import`` (docs/formats.md §5.3).

UTF-8 JSON, 2-space indent, trailing newline, keys in this order: ``format`` (``"rsi-harness"``),
``format_version`` (1), ``version``, ``parent`` (``""`` = none, i.e. derived from H0), ``manifest``,
``files`` (sorted), ``lineage`` (why it was adopted), ``created_at`` (UTC ``%Y-%m-%dT%H:%M:%SZ``),
``created_by`` (``"rsi-worker <package version>"``). File name ``sha256-<hex>.json``.

Decisions: the embedded ``manifest`` carries no ``parent`` (the top-level ``parent`` is the one source);
``lineage`` is any JSON value (a list of adoption records by convention). Parent and lineage never
change the version.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from rsi_common.boundary import MAX_CHECKPOINT_BYTES, parse_json
from rsi_common.errors import InvalidInput, ManifestError, ManifestLimitError, TamperError
from rsi_common.harness.payload import Harness, build_harness
from rsi_common.harness.storage import dir_name

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_FORMAT_VERSIONS",
    "Checkpoint",
    "checkpoint_filename",
    "checkpoint_json",
    "load_checkpoint",
]

CHECKPOINT_FORMAT = "rsi-harness"
CHECKPOINT_FORMAT_VERSIONS = (1, 1)
"""Inclusive range of ``format_version`` values this code reads."""


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the harness (its manifest carries ``parent``) and the provenance fields."""

    harness: Harness
    parent: str
    lineage: Any
    created_at: str
    created_by: str


def _package_version() -> str:
    try:
        return metadata.version("rsi-worker")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
        return "unknown"


def checkpoint_filename(version: str) -> str:
    """``sha256-<hex>.json``."""
    return dir_name(version) + ".json"


def checkpoint_json(
    harness: Harness,
    *,
    lineage: Any = None,
    parent: str | None = None,
    created_at: str | None = None,
    created_by: str | None = None,
) -> str:
    """The checkpoint text of ``harness``.

    Args:
        harness: the harness to export.
        lineage: why it was adopted (JSON); None → ``[]``.
        parent: parent version; None → the manifest's parent; ``""`` when there is none.
        created_at: UTC ``%Y-%m-%dT%H:%M:%SZ``; None → now.
        created_by: None → ``"rsi-worker <installed package version>"``.
    """
    obj = {
        "format": CHECKPOINT_FORMAT,
        "format_version": CHECKPOINT_FORMAT_VERSIONS[1],
        "version": harness.version,
        "parent": (harness.manifest.parent if parent is None else parent) or "",
        "manifest": harness.manifest.to_json(include_parent=False),
        "files": {p: harness.files[p] for p in sorted(harness.files)},
        "lineage": [] if lineage is None else lineage,
        "created_at": created_at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "created_by": created_by or f"rsi-worker {_package_version()}",
    }
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def load_checkpoint(data: str | bytes | Mapping[str, Any]) -> Checkpoint:
    """Read a checkpoint (its text or parsed object) and verify it.

    Raises:
        ManifestError: not a checkpoint, unsupported ``format_version``, malformed fields or manifest.
        TamperError: the recorded ``version`` differs from the version of the content.
    """
    if isinstance(data, (str, bytes)):
        try:  # the input boundary: size and depth before json.loads (docs/security/input-boundary.md)
            obj = parse_json(data, "checkpoint", max_bytes=MAX_CHECKPOINT_BYTES, error=ManifestLimitError)
        except ManifestLimitError:
            raise
        except InvalidInput as exc:
            raise ManifestError(f"a checkpoint must be JSON: {exc}") from None
    else:
        obj = data
    if not isinstance(obj, Mapping) or obj.get("format") != CHECKPOINT_FORMAT:
        raise ManifestError(f"not a harness checkpoint (format must be {CHECKPOINT_FORMAT!r})")
    fv = obj.get("format_version")
    lo, hi = CHECKPOINT_FORMAT_VERSIONS
    if not isinstance(fv, int) or isinstance(fv, bool) or not lo <= fv <= hi:
        raise ManifestError(f"unsupported checkpoint format_version {fv!r} (supported: {lo}..{hi})")
    parent = obj.get("parent", "")
    if not isinstance(parent, str):
        raise ManifestError("checkpoint 'parent' must be a string ('' = none)")
    manifest, files = obj.get("manifest"), obj.get("files", {})
    if not isinstance(manifest, Mapping) or not isinstance(files, Mapping):
        raise ManifestError("checkpoint needs an object 'manifest' and an object 'files'")
    manifest = {k: v for k, v in manifest.items() if k != "parent"}
    harness = build_harness(manifest, files).with_parent(parent or None)
    if obj.get("version") != harness.version:
        raise TamperError(
            f"checkpoint claims version {obj.get('version')!r} but its content has version {harness.version}"
        )
    return Checkpoint(harness, parent, obj.get("lineage", []), str(obj.get("created_at", "")),
                      str(obj.get("created_by", "")))
