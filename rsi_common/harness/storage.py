"""Harness directories (docs/formats.md §5.3): ``export_dir`` and ``load_dir``.

A harness directory holds ``manifest.json`` (the manifest object including ``parent``, 2-space
indented, UTF-8, trailing newline; project decision) and every referenced file under its relative
path. Other files in the directory are ignored.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from rsi_common.boundary import MAX_MANIFEST_BYTES, parse_json
from rsi_common.errors import InvalidInput, ManifestError, ManifestLimitError
from rsi_common.harness.manifest import load_manifest
from rsi_common.harness.paths import MANIFEST_FILE, safe_join
from rsi_common.harness.payload import Harness, build_harness

__all__ = ["dir_name", "export_dir", "load_dir", "manifest_text"]


def dir_name(version: str) -> str:
    """Directory (and checkpoint stem) name of a version: ``":"`` → ``"-"``."""
    return version.replace(":", "-")


def manifest_text(harness: Harness, *, include_parent: bool = True) -> str:
    """``json.dumps(manifest, indent=2, ensure_ascii=False) + "\\n"``."""
    return json.dumps(harness.manifest.to_json(include_parent=include_parent), indent=2,
                      ensure_ascii=False) + "\n"


def export_dir(harness: Harness, root: str | os.PathLike[str]) -> Path:
    """Write ``<root>/<version with ":" → "-">/`` and return its path.

    Files are written to a staging directory inside ``root`` which is then renamed into place, so a
    reader never sees a partial directory. An existing version directory is not rewritten (also when
    another writer wins the race).

    Raises:
        OSError: the directory cannot be written.
    """
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    final = base / dir_name(harness.version)
    if final.exists():
        return final
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=base))
    try:
        (staging / MANIFEST_FILE).write_text(manifest_text(harness), encoding="utf-8", newline="")
        for path, text in harness.files.items():
            target = safe_join(staging, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8", newline="")
        try:
            os.rename(staging, final)
        except OSError:
            if not final.exists():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final


def load_dir(path: str | os.PathLike[str]) -> Harness:
    """Read ``manifest.json`` and the referenced files (UTF-8, universal newlines) of a directory.

    Raises:
        ManifestError: no manifest, invalid JSON, a rule broken, a referenced file missing.
        PathEscapeError: a referenced path is unsafe or resolves (through a link) outside the directory.
    """
    root = Path(path)
    manifest_path = root / MANIFEST_FILE
    if not manifest_path.is_file():
        raise ManifestError(f"{root} has no {MANIFEST_FILE}")
    try:  # the input boundary: size and depth before json.loads (docs/security/input-boundary.md)
        obj = parse_json(manifest_path.read_bytes(), MANIFEST_FILE, max_bytes=MAX_MANIFEST_BYTES,
                         error=ManifestLimitError)
    except ManifestLimitError:
        raise
    except InvalidInput as exc:
        raise ManifestError(f"{manifest_path} is not valid UTF-8 JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ManifestError(f"{manifest_path} must hold a JSON object")
    manifest = load_manifest(obj)
    files: dict[str, str] = {}
    for rel in manifest.referenced_files():
        target = safe_join(root, rel)
        if not target.is_file():
            raise ManifestError(f"referenced file missing: {rel} (in {root})")
        try:
            with open(target, encoding="utf-8") as fh:  # universal newlines
                files[rel] = fh.read()
        except UnicodeDecodeError as exc:
            raise ManifestError(f"referenced file {rel} is not UTF-8 text: {exc}") from None
    return build_harness(manifest, files)
