"""Edit addresses and locks (docs/formats.md §5.1).

An address names one editable thing of a manifest: ``<component_id>.params.<k1>[.<k2>…]`` or
``<component_id>.files.<relative path>``; tagging (docs/formats.md §6.3) also uses ``<id>``, ``<id>.enabled``
and
``manifest.<field>``. Params with a ``.`` inside a key cannot be told apart from nesting; such keys are
addressed by their dotted path as is (project decision: they are legal but ambiguous).

:func:`address_values` flattens a harness into *every* address it has, with the value each one
holds; the exact set of addresses a candidate changes is the difference of two such maps
(``rsi_common.harness.tagging.changed_addresses``), and every lock pattern is checked against that
one set (docs/security/gate.md, "Locks").
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any, Literal, NamedTuple

from rsi_common.errors import LockedFieldError, ManifestError
from rsi_common.harness.manifest import ComponentSpec, Manifest, is_locked, load_manifest
from rsi_common.harness.version import canonical_json

__all__ = [
    "ORDER_ADDRESS",
    "PLATFORM_FIELDS",
    "Address",
    "address_values",
    "addresses_for",
    "changed_between",
    "component_values",
    "editable_addresses",
    "param_items",
    "param_leaves",
    "parse_address",
    "reordered",
    "with_param",
]

PLATFORM_FIELDS: tuple[str, ...] = ("locked", "enabled_kinds", "exploration_policy")
"""Manifest fields no candidate may ever change (docs/formats.md §6.3, docs/architecture.md invariant 8)."""
ORDER_ADDRESS = "manifest.order"
"""The address of the components' relative order."""


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


def param_items(params: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    """``(address, value)`` of every leaf of ``params`` under ``prefix`` (``"<id>.params"``).

    Non-empty dicts are walked; empty dicts, lists and scalars are leaves. Keys in insertion order.
    The walk uses an explicit stack (no recursion, whatever the nesting).
    """
    stack: list[tuple[str, Iterator[tuple[str, Any]]]] = [(prefix, iter(params.items()))]
    while stack:
        path, items = stack[-1]
        for key, value in items:
            addr = f"{path}.{key}"
            if isinstance(value, Mapping) and value:
                stack.append((addr, iter(value.items())))
                break
            yield addr, value
        else:
            stack.pop()


def param_leaves(params: Mapping[str, Any], prefix: str) -> Iterator[str]:
    """Addresses of the leaves of ``params`` under ``prefix`` (:func:`param_items` without values)."""
    return (addr for addr, _ in param_items(params, prefix))


def address_values(manifest: Manifest, files: Mapping[str, str]) -> dict[str, Any]:
    """Every address of a harness with the value it holds (module docstring).

    Addresses: ``manifest.name``, ``manifest.description``; per component ``<id>`` (its kind and
    impl), ``<id>.enabled``, ``<id>.description``, every param leaf ``<id>.params.<path>`` and every
    listed file ``<id>.files.<path>`` (its text; ``None`` when the file is missing). The platform
    fields (:data:`PLATFORM_FIELDS`) and the component order are compared separately (tagging).
    """
    out: dict[str, Any] = {"manifest.name": manifest.name, "manifest.description": manifest.description}
    for c in manifest.components:
        out.update(component_values(c, files))
    return out


def component_values(c: ComponentSpec, files: Mapping[str, str]) -> dict[str, Any]:
    """The addresses of one component with their values (see :func:`address_values`)."""
    out: dict[str, Any] = {c.id: (c.kind, c.impl), f"{c.id}.enabled": c.enabled,
                           f"{c.id}.description": c.description}
    out.update(param_items(c.params, f"{c.id}.params"))
    out.update((f"{c.id}.files.{p}", files.get(p)) for p in c.files)
    return out


def _same(x: Any, y: Any) -> bool:
    return type(x) is type(y) and canonical_json(x) == canonical_json(y)


def reordered(inc: Manifest, cand: Manifest) -> bool:
    """The components present in both manifests are in a different relative order."""
    cand_ids = {c.id for c in cand.components}
    inc_ids = {c.id for c in inc.components}
    return ([c.id for c in inc.components if c.id in cand_ids]
            != [c.id for c in cand.components if c.id in inc_ids])


def changed_between(inc: Manifest, inc_files: Mapping[str, str], cand: Manifest,
                    cand_files: Mapping[str, str]) -> list[str]:
    """The exact set of addresses ``cand`` changes against ``inc``, sorted: every address whose value
    differs between the two :func:`address_values` maps (present on one side only counts), plus
    :data:`ORDER_ADDRESS` when :func:`reordered`."""
    a, b = address_values(inc, inc_files), address_values(cand, cand_files)
    out = {k for k in a.keys() | b.keys() if k not in a or k not in b or not _same(a[k], b[k])}
    if reordered(inc, cand):
        out.add(ORDER_ADDRESS)
    return sorted(out)


def addresses_for(manifest: Manifest) -> list[str]:
    """Every param-leaf address and every file address, component by component in manifest order
    (params before files), disabled components included."""
    out: list[str] = []
    for c in manifest.components:
        out.extend(param_leaves(c.params, f"{c.id}.params"))
        out.extend(f"{c.id}.files.{p}" for p in c.files)
    return out


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
    node[parsed.keys[-1]] = copy.deepcopy(value)
    obj = manifest.to_json()
    for c in obj["components"]:
        if c["id"] == spec.id:
            c["params"] = params
    new = load_manifest(obj)
    locked = [a for a in changed_between(manifest, {}, new, {}) if is_locked(a, manifest.locked)]
    if locked:
        raise LockedFieldError(f"locked address(es) cannot be changed: {', '.join(locked)}")
    return new
