"""Canonical JSON and the content-addressed version of a harness (docs/algorithm/formulas.md conventions,
docs/formats.md §5.2)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from rsi_common.harness.manifest import Manifest

__all__ = ["canonical_json", "normalize_newlines", "version_id", "version_stream"]


def canonical_json(x: Any) -> str:
    """``json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` (encode as UTF-8)."""
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def normalize_newlines(text: str) -> str:
    """The text as Python's universal-newline reading gives it: ``\\r\\n`` and ``\\r`` become ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def version_stream(manifest: Manifest, files: Mapping[str, str]) -> bytes:
    """The exact byte stream that is hashed (docs/formats.md §5.2).

    The canonical JSON of ``manifest.to_json()`` without ``parent``, then for each distinct referenced
    path in sorted order ``0x00 + path + 0x00 + text`` (UTF-8; the text with universal newlines).

    Raises:
        KeyError: a referenced file is missing from ``files``.
    """
    parts = [canonical_json(manifest.to_json(include_parent=False)).encode("utf-8")]
    for path in manifest.referenced_files():
        parts.append(b"\x00" + path.encode("utf-8") + b"\x00")
        parts.append(normalize_newlines(files[path]).encode("utf-8"))
    return b"".join(parts)


def version_id(manifest: Manifest, files: Mapping[str, str]) -> str:
    """``"sha256:" + hex(SHA-256(version_stream))``: equal content ⇒ equal version, whatever the parent.

    Raises:
        KeyError: a referenced file is missing from ``files``.
    """
    return "sha256:" + hashlib.sha256(version_stream(manifest, files)).hexdigest()
