"""The in-memory harness, its payload and materialisation (docs/formats.md §5.3).

Decisions:

* File texts are stored with universal newlines (``\\r\\n``/``\\r`` → ``\\n``), as if read from disk,
  so a harness's files are exactly what its version hashes.
* Files that no component (nor ``exploration_policy.file``) references are dropped when a harness is
  built: they are not part of the version and nothing can read them.
* The input boundary (docs/security/input-boundary.md): each file's text is at most
  ``MAX_HARNESS_FILE_BYTES`` with no lone surrogate or U+0000 (refused), and a payload is
  depth-checked before it is hashed (:class:`~rsi_common.errors.ManifestLimitError`).
* Materialised harnesses are cached per process (at most :data:`CACHE_SIZE`, least recently used
  evicted). A cache hit requires the payload's manifest and files to be identical to the cached ones,
  so the tamper check can never be bypassed through the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from rsi_common.boundary import MAX_HARNESS_FILE_BYTES, check_depth, check_text
from rsi_common.errors import ManifestError, ManifestLimitError, TamperError
from rsi_common.harness.addresses import with_param
from rsi_common.harness.manifest import Manifest, load_manifest
from rsi_common.harness.version import canonical_json, normalize_newlines, version_id

__all__ = ["CACHE_SIZE", "Harness", "build_harness", "materialize"]

CACHE_SIZE = 64
"""Materialised harnesses kept per process."""


@dataclass(frozen=True, eq=True)
class Harness:
    """A manifest plus every file it references, with its content-addressed version."""

    manifest: Manifest
    files: Mapping[str, str]
    """Every referenced file, path → text (read-only)."""
    version: str
    """``"sha256:<hex>"`` of the content (docs/formats.md §5.2)."""

    def __hash__(self) -> int:
        return hash((self.version, self.manifest.parent))

    def __repr__(self) -> str:
        return f"Harness({self.manifest.name!r}, {self.version}, parent={self.manifest.parent!r})"

    def payload(self) -> dict[str, Any]:
        """``{"manifest": <manifest object>, "files": {path: text} (keys sorted), "version"}``."""
        return {
            "manifest": self.manifest.to_json(),
            "files": {p: self.files[p] for p in sorted(self.files)},
            "version": self.version,
        }

    def files_of(self, component_id: str) -> dict[str, str]:
        """The files listed by one component, path → text.

        Raises:
            KeyError: no such component, or one of its files is absent.
        """
        return {p: self.files[p] for p in self.manifest.component(component_id).files}

    def with_param(self, addr: str, value: Any) -> Harness:
        """A new harness with one param set (see ``addresses.with_param``); the parent is kept.

        Raises:
            LockedFieldError: the address is locked.
            ManifestError: the address or the result is invalid.
        """
        return build_harness(with_param(self.manifest, addr, value), self.files)

    def with_parent(self, parent: str | None) -> Harness:
        """The same content (same version) with another parent."""
        return Harness(self.manifest.with_parent(parent), self.files, self.version)


def build_harness(manifest: Mapping[str, Any] | Manifest, files: Mapping[str, str]) -> Harness:
    """Validate ``manifest``, keep the referenced ``files`` and compute the version.

    Raises:
        ManifestError: the manifest breaks a rule, a referenced file is missing or is not text.
        ManifestLimitError: the input boundary refuses the manifest or a file (a ``ManifestError``).
        PathEscapeError: a path is unsafe.
    """
    m = manifest if isinstance(manifest, Manifest) else load_manifest(manifest)
    kept: dict[str, str] = {}
    missing: list[str] = []
    for path in m.referenced_files():
        text = files.get(path)
        if text is None:
            missing.append(path)
        elif not isinstance(text, str):
            raise ManifestError(f"file {path!r} must be text, got {type(text).__name__}")
        else:
            check_text(text, f"files.{path}", max_bytes=MAX_HARNESS_FILE_BYTES, error=ManifestLimitError)
            kept[path] = normalize_newlines(text)
    if missing:
        raise ManifestError(f"referenced file(s) missing: {', '.join(missing)}")
    return Harness(m, MappingProxyType(kept), version_id(m, kept))


_cache: OrderedDict[str, tuple[str, Harness]] = OrderedDict()
_cache_lock = threading.Lock()


def materialize(payload: Mapping[str, Any]) -> Harness:
    """Build a harness from a payload ``{manifest, files, version}`` and check its version.

    Raises:
        TamperError: the claimed ``version`` differs from the version of the content (or is absent).
        ManifestError: the payload is malformed, the manifest breaks a rule or a file is missing.
        PathEscapeError: a path is unsafe.
    """
    if not isinstance(payload, Mapping):
        raise ManifestError("a harness payload must be an object {manifest, files, version}")
    manifest, files, claimed = payload.get("manifest"), payload.get("files", {}), payload.get("version")
    if not isinstance(manifest, Mapping) or not isinstance(files, Mapping):
        raise ManifestError("a harness payload needs an object 'manifest' and an object 'files'")
    check_depth(manifest, "manifest", error=ManifestLimitError)
    check_depth(files, "files", error=ManifestLimitError)
    try:
        fingerprint = canonical_json({"manifest": manifest, "files": files})
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"a harness payload must be JSON: {exc}") from None
    if isinstance(claimed, str):
        with _cache_lock:
            hit = _cache.get(claimed)
            if hit is not None and hit[0] == fingerprint:
                _cache.move_to_end(claimed)
                return hit[1]
    harness = build_harness(manifest, files)
    if claimed != harness.version:
        raise TamperError(
            f"payload claims version {claimed!r} but its content has version {harness.version}"
        )
    with _cache_lock:
        _cache[harness.version] = (fingerprint, harness)
        _cache.move_to_end(harness.version)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return harness
