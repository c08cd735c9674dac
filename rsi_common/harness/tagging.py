"""Tagging from manifests (docs/formats.md §6.3): what a candidate touched, and edits re-tagged from it.

Evidence comes from what the manifests say changed, not from prose. Touch order (which fixes
``address_diff``): components of the candidate in manifest order (within one: add/remove, enable
toggle, params in the incumbent's key order then new keys, files in list order, removed files), then
components only in the incumbent (their order), then ``manifest.name`` and ``manifest.description``,
then ``manifest.order`` when the components present on both sides changed their relative order.

**Locks (one function).** :func:`changed_addresses` is the exact set of addresses a candidate
changes: the addresses whose value differs between the two :func:`~rsi_common.harness.addresses.
address_values` maps (manifest fields, each component's kind/impl, ``enabled`` and description,
param leaves, listed files added, changed and removed) plus ``manifest.order``. Every one of them is
checked against every lock pattern of the incumbent; a locked one is a violation ``locked address
<a> changed`` (docs/security/gate.md, "Locks").

Decisions where docs/formats.md §6.3 is silent:

* a change of the content of ``exploration_policy.file`` counts as a change of the platform field
  ``exploration_policy`` (the Dream-RSI loop owns it);
* a ``set`` is a violation when its address or any leaf under it (old or new value) is locked;
* when an edit's ``addresses`` cover no touch at all, its scope is every touch (as when it declares
  none), so a wrong address cannot strip an edit of its evidence;
* an edit that already carries ``declared_component`` (normalised before) keeps it and is normalised
  from it, so :func:`normalize_edits` is idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from rsi_common.harness.addresses import ORDER_ADDRESS, changed_between, reordered
from rsi_common.harness.diff import split_workspace
from rsi_common.harness.manifest import ComponentSpec, Manifest, is_locked, load_manifest
from rsi_common.harness.payload import Harness
from rsi_common.harness.version import canonical_json
from rsi_common.kinds import in_kind_order

__all__ = ["Op", "Touch", "TouchSet", "Tree", "changed_addresses", "covers", "normalize_edits", "touched"]

Op = Literal[
    "add_component", "remove_component", "enable", "disable", "set", "add_file", "edit_file",
    "remove_file", "meta", "reorder",
]

Tree = Harness | Mapping[str, str]
"""A harness, or a workspace (path → text with ``manifest.json``)."""


class Touch(NamedTuple):
    """One change: ``component_id`` and ``kind`` are None for ``meta`` touches."""

    address: str
    component_id: str | None
    kind: str | None
    op: Op


@dataclass(frozen=True)
class TouchSet:
    """The touches of a candidate against its incumbent, its violations and orphan files."""

    touches: tuple[Touch, ...]
    violations: tuple[str, ...]
    """Readable reasons: a locked address, a platform field changed, a listed file missing."""
    orphans: tuple[str, ...]
    """Sorted workspace files, new or changed, that nothing references."""
    changed: tuple[str, ...] = ()
    """The exact set of changed addresses (:func:`changed_addresses`), sorted."""

    @property
    def kinds(self) -> tuple[str, ...]:
        """Distinct touched kinds, in 𝒦 order."""
        return self.kinds_for(self.touches)

    def kinds_for(self, scope: Iterable[Touch]) -> tuple[str, ...]:
        """Distinct kinds of ``scope``, in 𝒦 order."""
        return in_kind_order(t.kind for t in scope if t.kind is not None)

    def address_diff(self, scope: Iterable[Touch] | None = None) -> str:
        """``"\\n".join("+" + address)`` over ``scope`` (default: all touches) in touch order."""
        return "\n".join("+" + t.address for t in (self.touches if scope is None else scope))

    def signals(self) -> dict[str, list[str]]:
        """Per touched kind (𝒦 order), ``(?m)^\\+<re.escape(component_id)>(?:\\.|$)`` per touched id."""
        out: dict[str, list[str]] = {}
        for kind in self.kinds:
            ids = dict.fromkeys(t.component_id for t in self.touches if t.kind == kind and t.component_id)
            out[kind] = [rf"(?m)^\+{re.escape(cid)}(?:\.|$)" for cid in ids if cid is not None]
        return out

    def set_addresses(self) -> list[str]:
        """Addresses of the ``set`` touches: the touched params of the exercised guard
        (docs/algorithm/consolidation.md §3.11)."""
        return [t.address for t in self.touches if t.op == "set"]

    @property
    def ok(self) -> bool:
        """No violation and no orphan."""
        return not self.violations and not self.orphans


def covers(r: str, a: str) -> bool:
    """``r == a``, or one is a dot-boundary prefix of the other (docs/algorithm/consolidation.md §3.11)."""
    return r == a or a.startswith(r + ".") or r.startswith(a + ".")


def _side(tree: Tree) -> tuple[Manifest, Mapping[str, str]]:
    if isinstance(tree, Harness):
        return tree.manifest, tree.files
    obj, files = split_workspace(tree)
    return load_manifest(obj), files


def _param_diff(a: Mapping[str, Any], b: Mapping[str, Any], path: str) -> Iterator[tuple[str, Any, Any]]:
    for key in dict.fromkeys([*a, *b]):
        p = f"{path}.{key}"
        if key not in a or key not in b:
            yield p, a.get(key), b.get(key)
            continue
        x, y = a[key], b[key]
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            yield from _param_diff(x, y, p)
        elif type(x) is not type(y) or canonical_json(x) != canonical_json(y):
            yield p, x, y


class _Builder:
    def __init__(self) -> None:
        self.touches: list[Touch] = []

    def touch(self, address: str, spec: ComponentSpec | None, op: Op) -> None:
        self.touches.append(Touch(address, spec.id if spec else None, spec.kind if spec else None, op))

    def added(self, spec: ComponentSpec) -> None:
        self.touch(spec.id, spec, "add_component")
        for p in spec.files:
            self.touch(f"{spec.id}.files.{p}", spec, "add_file")

    def removed(self, spec: ComponentSpec) -> None:
        self.touch(spec.id, spec, "remove_component")

    def changed(self, old: ComponentSpec, new: ComponentSpec, old_files: Mapping[str, str],
                new_files: Mapping[str, str]) -> None:
        if old.enabled != new.enabled:
            self.touch(f"{new.id}.enabled", new, "enable" if new.enabled else "disable")
        for addr, _x, _y in _param_diff(old.params, new.params, f"{new.id}.params"):
            self.touch(addr, new, "set")
        for p in new.files:
            if p not in old.files:
                self.touch(f"{new.id}.files.{p}", new, "add_file")
            elif old_files.get(p) != new_files.get(p):
                self.touch(f"{new.id}.files.{p}", new, "edit_file")
        for p in old.files:
            if p not in new.files:
                self.touch(f"{new.id}.files.{p}", new, "remove_file")


def changed_addresses(inc: Tree, cand: Tree) -> list[str]:
    """The exact set of addresses ``cand`` changes against ``inc``, sorted (module docstring).

    Raises:
        ManifestError: a side's manifest is missing, not JSON, or breaks a rule of docs/formats.md §5.1.
    """
    inc_m, inc_files = _side(inc)
    cand_m, cand_files = _side(cand)
    return changed_between(inc_m, inc_files, cand_m, cand_files)


def touched(inc: Tree, cand: Tree) -> TouchSet:
    """The touch set of ``cand`` against ``inc`` (docs/formats.md §6.3).

    Args:
        inc: the incumbent harness (or workspace).
        cand: the candidate workspace (or harness); files it lists may be missing (a violation).

    Raises:
        ManifestError: a side's manifest is missing, not JSON, or breaks a rule of docs/formats.md §5.1.
    """
    inc_m, inc_files = _side(inc)
    cand_m, cand_files = _side(cand)
    b = _Builder()
    inc_by_id = {c.id: c for c in inc_m.components}
    for new in cand_m.components:
        old = inc_by_id.get(new.id)
        if old is None:
            b.added(new)
        elif (old.kind, old.impl) != (new.kind, new.impl):
            b.removed(old)
            b.added(new)
        else:
            b.changed(old, new, inc_files, cand_files)
    cand_ids = {c.id for c in cand_m.components}
    for old in inc_m.components:
        if old.id not in cand_ids:
            b.removed(old)
    for field in ("name", "description"):
        if getattr(inc_m, field) != getattr(cand_m, field):
            b.touch(f"manifest.{field}", None, "meta")
    if reordered(inc_m, cand_m):
        b.touch(ORDER_ADDRESS, None, "reorder")
    changed = changed_between(inc_m, inc_files, cand_m, cand_files)
    violations = [f"locked address {a} changed" for a in changed if is_locked(a, inc_m.locked)]
    violations.extend(_platform_violations(inc_m, cand_m, inc_files, cand_files))
    for c in cand_m.components:
        violations.extend(f"missing file {p} (listed by {c.id})" for p in c.files if p not in cand_files)
    policy_file = cand_m.policy_file()
    if policy_file is not None and policy_file not in cand_files:
        violations.append(f"missing file {policy_file} (exploration_policy)")
    referenced = set(cand_m.referenced_files())
    orphans = sorted(p for p, t in cand_files.items()
                     if p not in referenced and inc_files.get(p) != t)
    return TouchSet(tuple(b.touches), tuple(dict.fromkeys(violations)), tuple(orphans), tuple(changed))


def _platform_violations(inc: Manifest, cand: Manifest, inc_files: Mapping[str, str],
                         cand_files: Mapping[str, str]) -> Iterator[str]:
    if inc.locked != cand.locked:
        yield "platform field locked changed"
    if inc.enabled_kinds != cand.enabled_kinds:
        yield "platform field enabled_kinds changed"
    inc_pol = None if inc.exploration_policy is None else canonical_json(dict(inc.exploration_policy))
    cand_pol = None if cand.exploration_policy is None else canonical_json(dict(cand.exploration_policy))
    pf = inc.policy_file()
    if inc_pol != cand_pol or (pf is not None and inc_files.get(pf) != cand_files.get(pf)):
        yield "platform field exploration_policy changed"


def normalize_edits(
    edits: Iterable[Mapping[str, Any]],
    ts: TouchSet,
    domain_signals: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """Re-tag each edit's ``component`` from the addresses it touched (docs/formats.md §6.3,
    docs/algorithm/formulas.md §2.7).

    ``scope`` = the touches covered (:func:`covers`) by the edit's own ``addresses``, or every touch
    when the edit has none or they cover nothing. ``component =
    normalize_component(declared, ts.kinds_for(scope), ts.address_diff(scope), signals)`` with
    ``signals`` = ``domain_signals`` followed by ``ts.signals()`` (lists merged per kind).

    Args:
        edits: declared edits (docs/algorithm/formulas.md §2.1 ``Edit`` as dicts, or objects with
        ``to_json()``).
        ts: the candidate's touch set.
        domain_signals: ordered kind → regexes consulted before the address signals.

    Returns:
        New dicts, in order, with ``component`` re-tagged and ``declared_component`` = the declared tag.
    """
    # Imported on use: the formulas package is heavier than what a host needs to load a harness.
    from rsi_common.math.rrsi import normalize_component

    signals: dict[str, list[str]] = {k: list(v) for k, v in (domain_signals or {}).items()}
    for kind, regexes in ts.signals().items():
        signals.setdefault(kind, []).extend(regexes)
    out: list[dict[str, Any]] = []
    for edit in edits:
        e = dict(edit.to_json() if hasattr(edit, "to_json") else edit)
        declared = e.get("declared_component", e.get("component"))
        addresses = [a for a in e.get("addresses") or () if isinstance(a, str)]
        scope = [t for t in ts.touches if any(covers(r, t.address) for r in addresses)] or list(ts.touches)
        e["component"] = normalize_component(declared, ts.kinds_for(scope), ts.address_diff(scope), signals)
        e["declared_component"] = declared
        out.append(e)
    return out

