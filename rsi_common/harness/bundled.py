"""Bundled harnesses (``rsi_common/harness/builtin/<name>/``), H0 (docs/formats.md §5.5) and resolution
(§5.4)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from rsi_common.errors import ManifestError
from rsi_common.harness.paths import MANIFEST_FILE
from rsi_common.harness.payload import Harness, materialize
from rsi_common.harness.storage import load_dir

__all__ = [
    "BUILTIN_PREFIX",
    "BUILTIN_ROOT",
    "H0_VERSION",
    "HarnessLabel",
    "builtin_dir",
    "h0",
    "load_builtin",
    "resolve_harness",
]

BUILTIN_ROOT = Path(__file__).resolve().parent / "builtin"
"""Directory of the bundled harnesses."""
BUILTIN_PREFIX = "builtin:"
"""``RSI_HARNESS_DIR`` value prefix selecting a bundled harness."""
H0_VERSION = "sha256:200eb5deca0ae54d38a3429291b7347cdf96c8af29a7390df286b6ee9d5da7cd"
"""The version of H0 (docs/check-vectors.md §9.11)."""

HarnessLabel = Literal["fixed", "agent", "h0"]


def builtin_dir(name: str) -> Path:
    """The bundled directory ``builtin/<name>/``: a direct child holding a ``manifest.json``.

    Raises:
        ManifestError: ``name`` is not a direct child name or has no manifest.
    """
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise ManifestError(f"{BUILTIN_PREFIX}{name}: not a bundled harness name")
    path = BUILTIN_ROOT / name
    if not (path / MANIFEST_FILE).is_file():
        known = sorted(p.name for p in BUILTIN_ROOT.iterdir() if (p / MANIFEST_FILE).is_file())
        raise ManifestError(f"no bundled harness {name!r}; bundled: {', '.join(known)}")
    return path


@functools.lru_cache(maxsize=8)
def load_builtin(name: str) -> Harness:
    """A bundled harness, loaded once per process (treat it as read-only).

    Raises:
        ManifestError: unknown name or invalid bundle.
    """
    return load_dir(builtin_dir(name))


def h0() -> Harness:
    """H0, the starting harness (docs/formats.md §5.5); its version is :data:`H0_VERSION`."""
    return load_builtin("h0")


def resolve_harness(
    harness_dir: str | None, payload: Mapping[str, Any] | None
) -> tuple[Harness, HarnessLabel]:
    """The harness of a turn and its lineage label (docs/formats.md §5.4).

    1. ``harness_dir`` (the ``RSI_HARNESS_DIR`` admin pin): ``builtin:<name>`` → the bundled directory,
       any other value → :func:`load_dir`; label ``fixed``.
    2. else ``payload`` (the agent's current version) → :func:`materialize`; label ``agent``.
    3. else H0; label ``h0``.

    Raises:
        ManifestError, PathEscapeError, TamperError: the pinned directory or the payload is invalid
            (never silently replaced by H0).
    """
    if harness_dir:
        if harness_dir.startswith(BUILTIN_PREFIX):
            return load_builtin(harness_dir[len(BUILTIN_PREFIX):]), "fixed"
        return load_dir(harness_dir), "fixed"
    if payload is not None:
        return materialize(payload), "agent"
    return h0(), "h0"
