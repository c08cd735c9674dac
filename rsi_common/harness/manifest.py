"""The manifest model ``rsi-harness/1`` and its validation (docs/formats.md §5.1, emission rules of §5.2).

Decisions where docs/formats.md §5.1 is silent (all raise :class:`~rsi_common.errors.ManifestError`):

* unknown keys in the manifest or in a component are refused (a typo would otherwise silently drop
  out of the content-addressed version);
* ``params`` and ``exploration_policy`` must be JSON (string keys, finite numbers);
* a component may not list the same file twice, and no referenced file may be named
  ``manifest.json`` (it would collide with the manifest in a directory or workspace);
* ``parent`` is a string or null; ``""`` is read as null (no parent);
* ``exploration_policy`` is null or an object whose ``file`` is a referenced path; its other keys
  (``default_beta``, ``W``, …) are free JSON.
* the input boundary (docs/security/input-boundary.md): the depth (at most ``MAX_DEPTH`` levels) is
  checked first, before anything copies the manifest; after the rules above, one walk checks at
  most ``MAX_MANIFEST_BYTES``, no lone surrogate or U+0000 in any string or key (refused, never
  repaired), every integer — numeric params included — within ±(2**53 − 1) and every float finite
  (:class:`~rsi_common.errors.ManifestLimitError`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from rsi_common.boundary import MAX_MANIFEST_BYTES, check_depth, key_segment, scan
from rsi_common.errors import ManifestError, ManifestLimitError
from rsi_common.harness.paths import MANIFEST_FILE, check_path
from rsi_common.kinds import KINDS, REQUIRED_KINDS, in_kind_order

__all__ = [
    "IMPL_PREFIX",
    "SCHEMA",
    "SINGLETON_KINDS",
    "ComponentSpec",
    "Manifest",
    "is_locked",
    "load_manifest",
]

SCHEMA = "rsi-harness/1"
"""Schema id of every manifest."""
IMPL_PREFIX = "rsi_common.kernel.components."
"""Every ``impl`` starts with this prefix and contains ``:`` (module:Class)."""
SINGLETON_KINDS: tuple[str, ...] = ("prompt", "control_flow", "output_plumbing")
"""Kinds with at most one enabled component."""

_MANIFEST_KEYS = frozenset(
    {"schema", "name", "description", "parent", "components", "exploration_policy", "enabled_kinds",
     "locked"}
)
_COMPONENT_KEYS = frozenset({"id", "kind", "impl", "params", "files", "enabled", "description"})


@dataclass(frozen=True)
class ComponentSpec:
    """One typed component of a manifest. ``params`` is a nested JSON object; treat it as read-only."""

    id: str
    kind: str
    impl: str
    params: Mapping[str, Any]
    files: tuple[str, ...] = ()
    enabled: bool = True
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        """The component as emitted in a manifest (docs/formats.md §5.2): optional fields only when not
        default."""
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "impl": self.impl}
        if self.description:
            out["description"] = self.description
        if self.params:
            out["params"] = copy.deepcopy(dict(self.params))
        if self.files:
            out["files"] = list(self.files)
        if not self.enabled:
            out["enabled"] = False
        return out


@dataclass(frozen=True)
class Manifest:
    """A validated ``rsi-harness/1`` manifest; build it with :func:`load_manifest`."""

    schema: str
    name: str
    description: str
    parent: str | None
    components: tuple[ComponentSpec, ...]
    exploration_policy: Mapping[str, Any] | None
    enabled_kinds: tuple[str, ...]
    """Kept in 𝒦 order."""
    locked: tuple[str, ...]
    """fnmatch patterns of addresses no candidate may change."""

    def to_json(self, *, include_parent: bool = True) -> dict[str, Any]:
        """The manifest object per the emission rules of docs/formats.md §5.2.

        ``schema``, ``name`` and ``components`` are always present; ``description`` only if non-empty,
        ``exploration_policy`` only if not null, ``enabled_kinds`` only if it differs from 𝒦 (as an
        ordered list), ``locked`` only if non-empty, ``parent`` only if set and ``include_parent``.
        Returns a fresh deep copy.
        """
        out: dict[str, Any] = {"schema": self.schema, "name": self.name}
        if self.description:
            out["description"] = self.description
        if include_parent and self.parent is not None:
            out["parent"] = self.parent
        out["components"] = [c.to_json() for c in self.components]
        if self.exploration_policy is not None:
            out["exploration_policy"] = copy.deepcopy(dict(self.exploration_policy))
        if self.enabled_kinds != KINDS:
            out["enabled_kinds"] = list(self.enabled_kinds)
        if self.locked:
            out["locked"] = list(self.locked)
        return out

    def component(self, id: str) -> ComponentSpec:
        """The component with this id.

        Raises:
            KeyError: no such component.
        """
        for c in self.components:
            if c.id == id:
                return c
        raise KeyError(id)

    def enabled_components(self) -> tuple[ComponentSpec, ...]:
        """The enabled components, in manifest order."""
        return tuple(c for c in self.components if c.enabled)

    def referenced_files(self) -> tuple[str, ...]:
        """Distinct paths referenced by any component (enabled or not) or ``exploration_policy.file``,
        sorted."""
        paths = {p for c in self.components for p in c.files}
        policy_file = self.policy_file()
        if policy_file is not None:
            paths.add(policy_file)
        return tuple(sorted(paths))

    def policy_file(self) -> str | None:
        """``exploration_policy.file``, or None."""
        if self.exploration_policy is None:
            return None
        f = self.exploration_policy.get("file")
        return f if isinstance(f, str) else None

    def is_locked(self, addr: str) -> bool:
        """Whether ``addr`` is locked by this manifest's ``locked`` patterns (:func:`is_locked`)."""
        return is_locked(addr, self.locked)

    def with_parent(self, parent: str | None) -> Manifest:
        """A copy with ``parent`` replaced (provenance only; the version does not change)."""
        return Manifest(self.schema, self.name, self.description, parent or None, self.components,
                        self.exploration_policy, self.enabled_kinds, self.locked)


def load_manifest(obj: Mapping[str, Any], files: Mapping[str, str] | None = None) -> Manifest:
    """Validate a manifest object and build the :class:`Manifest` (docs/formats.md §5.1).

    Args:
        obj: the manifest as parsed JSON.
        files: when given, every referenced file must be a key of it.

    Raises:
        ManifestError: a rule is broken; the message says which and where.
        ManifestLimitError: the input boundary refuses the manifest (a ``ManifestError`` too).
        PathEscapeError: a file path is not a safe relative path (a ``ManifestError`` too).
    """
    if not isinstance(obj, Mapping):
        raise ManifestError(f"a manifest must be a JSON object, got {type(obj).__name__}")
    check_depth(obj, "manifest", error=ManifestLimitError)
    unknown = _unknown(obj, _MANIFEST_KEYS)
    if unknown:
        raise ManifestError(f"unknown manifest field(s): {', '.join(unknown)}")
    if obj.get("schema") != SCHEMA:
        raise ManifestError(f"manifest schema must be exactly {SCHEMA!r}, got {obj.get('schema')!r}")
    name = _str_field(obj, "name", "harness", "manifest")
    description = _str_field(obj, "description", "", "manifest")
    parent = obj.get("parent")
    if parent is not None and not isinstance(parent, str):
        raise ManifestError(f"manifest 'parent' must be a version string or null, got {parent!r}")
    enabled_kinds = _enabled_kinds(obj.get("enabled_kinds", list(KINDS)))
    locked = _string_list(obj.get("locked", []), "manifest 'locked'")
    policy = _exploration_policy(obj.get("exploration_policy"))
    raw_components = obj.get("components", [])
    if not isinstance(raw_components, list):
        raise ManifestError("manifest 'components' must be a list")
    components = tuple(_component(c, i) for i, c in enumerate(raw_components))
    manifest = Manifest(SCHEMA, name, description, parent or None, components, policy, enabled_kinds,
                        locked)
    _check_components(manifest)
    scan(obj, "manifest", max_bytes=MAX_MANIFEST_BYTES, error=ManifestLimitError)
    if files is not None:
        missing = [p for p in manifest.referenced_files() if p not in files]
        if missing:
            raise ManifestError(f"referenced file(s) missing: {', '.join(missing)}")
    return manifest


def _unknown(obj: Mapping[Any, Any], known: frozenset[str]) -> list[str]:
    """Sorted names of unknown keys; a key that is not a short identifier is shown by position
    (``<key N>``), so a message never carries a bad character or a secret."""
    return sorted(key_segment(k, i)[1:] for i, k in enumerate(obj) if k not in known)


def _str_field(obj: Mapping[str, Any], key: str, default: str, where: str) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        raise ManifestError(f"{where} {key!r} must be a string, got {value!r}")
    return value


def _string_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ManifestError(f"{where} must be a list of non-empty strings, got {value!r}")
    return tuple(value)


def _enabled_kinds(value: Any) -> tuple[str, ...]:
    kinds = _string_list(value, "manifest 'enabled_kinds'")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ManifestError(
            f"enabled_kinds must be a subset of {', '.join(KINDS)}; unknown: {', '.join(unknown)}"
        )
    return in_kind_order(kinds)


def _exploration_policy(value: Any) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ManifestError("manifest 'exploration_policy' must be an object {file, default_beta, W} or null")
    check_path(value.get("file"), where="exploration_policy file")
    _check_json(value, "exploration_policy")
    return copy.deepcopy(dict(value))


def _component(raw: Any, index: int) -> ComponentSpec:
    where = f"component #{index}"
    if not isinstance(raw, Mapping):
        raise ManifestError(f"{where} must be an object")
    cid = raw.get("id")
    if not isinstance(cid, str) or not cid:
        raise ManifestError(f"{where} needs a non-empty string 'id'")
    where = f"component {cid!r}"
    unknown = _unknown(raw, _COMPONENT_KEYS)
    if unknown:
        raise ManifestError(f"{where} has unknown field(s): {', '.join(unknown)}")
    if ".params." in cid or ".files." in cid:
        raise ManifestError(f"{where}: an id must not contain '.params.' or '.files.'")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ManifestError(f"{where} has kind {kind!r}; kinds are {', '.join(KINDS)}")
    impl = raw.get("impl")
    if not isinstance(impl, str) or not impl.startswith(IMPL_PREFIX) or ":" not in impl:
        raise ManifestError(
            f"{where} has impl {impl!r}; an impl is '{IMPL_PREFIX}<module>:<Class>'"
        )
    params = raw.get("params", {})
    if not isinstance(params, Mapping):
        raise ManifestError(f"{where} 'params' must be a JSON object")
    _check_json(params, f"{where} params")
    files = raw.get("files", [])
    if not isinstance(files, list):
        raise ManifestError(f"{where} 'files' must be a list of relative paths")
    for p in files:
        check_path(p, where=f"{where} file")
        if p == MANIFEST_FILE:
            raise ManifestError(f"{where} may not reference {MANIFEST_FILE!r} (reserved for the manifest)")
    if len(set(files)) != len(files):
        raise ManifestError(f"{where} lists a file twice")
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ManifestError(f"{where} 'enabled' must be true or false")
    description = _str_field(raw, "description", "", where)
    return ComponentSpec(cid, kind, impl, copy.deepcopy(dict(params)), tuple(files), enabled, description)


def is_locked(addr: str, patterns: Sequence[str]) -> bool:
    """Whether a ``locked`` pattern covers ``addr``: ``fnmatchcase(addr, p) or fnmatchcase(addr, p + ".*")``
    for some pattern p (case-sensitive), so a pattern locks an address and everything under it."""
    return any(fnmatchcase(addr, p) or fnmatchcase(addr, p + ".*") for p in patterns)


def _check_components(m: Manifest) -> None:
    seen: set[str] = set()
    for c in m.components:
        if c.id in seen:
            raise ManifestError(f"component id {c.id!r} is used twice; ids must be unique")
        seen.add(c.id)
        if c.enabled and c.kind not in m.enabled_kinds:
            raise ManifestError(
                f"component {c.id!r} is enabled but its kind {c.kind!r} is not in enabled_kinds"
                f" ({', '.join(m.enabled_kinds)})"
            )
    enabled = m.enabled_components()
    for kind in REQUIRED_KINDS:
        if not any(c.kind == kind for c in enabled):
            raise ManifestError(f"the harness needs at least one enabled {kind!r} component")
    for kind in SINGLETON_KINDS:
        ids = [c.id for c in enabled if c.kind == kind]
        if len(ids) > 1:
            raise ManifestError(
                f"at most one enabled {kind!r} component is allowed, found {len(ids)}: {', '.join(ids)}"
            )
    policy_file = m.policy_file()
    if policy_file == MANIFEST_FILE:
        raise ManifestError(f"exploration_policy may not reference {MANIFEST_FILE!r}")


def _check_json(value: Any, where: str) -> None:
    """Refuse anything that is not plain JSON (string keys, finite numbers)."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        v, path = stack.pop()
        if isinstance(v, Mapping):
            for i, (k, item) in enumerate(v.items()):
                if not isinstance(k, str):
                    raise ManifestError(f"{path}: keys must be strings, got {type(k).__name__}")
                stack.append((item, path + key_segment(k, i)))  # never a key's raw text
        elif isinstance(v, Sequence) and not isinstance(v, str):
            if not isinstance(v, list):
                raise ManifestError(f"{path}: {type(v).__name__} is not JSON")
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(v))
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ManifestError(f"{path}: {v!r} is not a finite JSON number")
        elif v is not None and not isinstance(v, (str, int, bool)):
            raise ManifestError(f"{path}: {type(v).__name__} is not JSON")
