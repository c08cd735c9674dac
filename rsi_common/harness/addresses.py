"""Edit addresses and locks (SPEC §5.1).

An address names one editable thing of a manifest: ``<component_id>.params.<k1>[.<k2>…]`` or
``<component_id>.files.<relative path>``; tagging (§6.3) also uses ``<id>``, ``<id>.enabled`` and
``manifest.<field>``. Params with a ``.`` inside a key cannot be told apart from nesting; such keys are
addressed by their dotted path as is (project decision: they are legal but ambiguous).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any, Literal, NamedTuple

from rsi_common.errors import LockedFieldError, ManifestError
from rsi_common.harness.manifest import Manifest, load_manifest

__all__ = [
    "PLATFORM_FIELDS",
    "Address",
    "addresses_for",
    "editable_addresses",
    "is_locked",
    "locked_leaves",
    "param_leaves",
    "parse_address",
    "with_param",
]

PLATFORM_FIELDS: tuple[str, ...] = ("locked", "enabled_kinds", "exploration_policy")
"""Manifest fields no candidate may ever change (SPEC §6.3, ARCHITECTURE invariant 8)."""


class Address(NamedTuple):
    """A parsed edit address: ``section`` is ``params`` or ``files``; ``rest`` the key path or file path."""

    component_id: str
    section: Literal["params", "files"]
    rest: str

    @property
    def keys(self) -> tuple[str, ...]:
        """The param key path (``rest`` split on ``.``); meaningful for ``params`` addresses."""
        return tuple(self.rest.split("."))

    def __str__(self) -> str:
        return f"{self.component_id}.{self.section}.{self.rest}"


def parse_address(addr: str) -> Address:
    """Split an address at the first ``.params.`` or ``.files.`` after position 0.

    Raises:
        ManifestError: neither marker occurs after position 0, or nothing follows it.
    """
    hits = [(i, s) for s in ("params", "files") if (i := addr.find(f".{s}.", 1)) > 0]
    if not hits:
        raise ManifestError(f"{addr!r} is not an edit address (<id>.params.<key> or <id>.files.<path>)")
    i, section = min(hits)
    rest = addr[i + len(section) + 2:]
    if not rest:
        raise ManifestError(f"address {addr!r} names no param key or file")
    return Address(addr[:i], "params" if section == "params" else "files", rest)


def param_leaves(params: Mapping[str, Any], prefix: str) -> Iterator[str]:
    """Addresses of the leaves of ``params`` under ``prefix`` (``"<id>.params"``).

    Non-empty dicts are walked; empty dicts, lists and scalars are leaves. Keys in insertion order.
    """
    for key, value in params.items():
        path = f"{prefix}.{key}"
        if isinstance(value, Mapping) and value:
            yield from param_leaves(value, path)
        else:
            yield path


def addresses_for(manifest: Manifest) -> list[str]:
    """Every param-leaf address and every file address, component by component in manifest order
    (params before files), disabled components included."""
    out: list[str] = []
    for c in manifest.components:
        out.extend(param_leaves(c.params, f"{c.id}.params"))
        out.extend(f"{c.id}.files.{p}" for p in c.files)
    return out


def is_locked(addr: str, patterns: Sequence[str]) -> bool:
    """``fnmatchcase(addr, p) or fnmatchcase(addr, p + ".*")`` for some pattern p (case-sensitive)."""
    return any(fnmatchcase(addr, p) or fnmatchcase(addr, p + ".*") for p in patterns)


def locked_leaves(addr: str, values: Sequence[Any], patterns: Sequence[str]) -> list[str]:
    """``addr`` and the leaf addresses under it in any of ``values`` (dicts are walked) that are locked.

    Used so that replacing a whole sub-object cannot smuggle in a change below a locked address.
    """
    hits = [addr] if is_locked(addr, patterns) else []
    for v in values:
        if isinstance(v, Mapping):
            hits.extend(a for a in param_leaves(v, addr) if is_locked(a, patterns) and a not in hits)
    return hits


def editable_addresses(manifest: Manifest) -> list[str]:
    """:func:`addresses_for` without the addresses locked by the manifest's own ``locked`` patterns."""
    return [a for a in addresses_for(manifest) if not is_locked(a, manifest.locked)]


def with_param(manifest: Manifest, addr: str, value: Any) -> Manifest:
    """A new manifest with the param at ``addr`` set to ``value`` (a JSON value).

    Missing intermediate objects are created (project decision). The result is validated again.

    Raises:
        LockedFieldError: ``addr`` (or a leaf under it, old or new) is locked by ``manifest.locked``.
        ManifestError: not a params address, unknown component, a non-object on the key path, or the
            result breaks a manifest rule.
    """
    parsed = parse_address(addr)
    if parsed.section != "params":
        raise ManifestError(f"{addr!r} is a file address; with_param sets params only")
    try:
        spec = manifest.component(parsed.component_id)
    except KeyError:
        raise ManifestError(f"no component {parsed.component_id!r} in the manifest") from None
    params = copy.deepcopy(dict(spec.params))
    node: dict[str, Any] = params
    for key in parsed.keys[:-1]:
        nxt = node.setdefault(key, {})
        if not isinstance(nxt, dict):
            raise ManifestError(f"{addr!r}: {key!r} holds a {type(nxt).__name__}, not an object")
        node = nxt
    old = node.get(parsed.keys[-1])
    locked = locked_leaves(addr, [old, value], manifest.locked)
    if locked:
        raise LockedFieldError(f"locked address(es) cannot be changed: {', '.join(locked)}")
    node[parsed.keys[-1]] = copy.deepcopy(value)
    obj = manifest.to_json()
    for c in obj["components"]:
        if c["id"] == spec.id:
            c["params"] = params
    return load_manifest(obj)
