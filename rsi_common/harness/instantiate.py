"""Turning a harness into component instances (SPEC §5.1 ``instantiate``)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rsi_common.errors import ManifestError
from rsi_common.harness.impls import PROTOCOL_METHODS
from rsi_common.harness.manifest import ComponentSpec
from rsi_common.harness.payload import Harness

if TYPE_CHECKING:
    from rsi_common.kernel.components.base import Component

__all__ = ["check_component", "default_registry", "instantiate"]


def default_registry() -> Mapping[str, type]:
    """``rsi_common.kernel.components.REGISTRY`` (imported on first use: the kernel imports this package)."""
    module = importlib.import_module("rsi_common.kernel.components")
    registry: Mapping[str, type] = module.REGISTRY
    return registry


def check_component(spec: ComponentSpec, harness: Harness, registry: Mapping[str, type]) -> type:
    """The registered class of ``spec`` after every load check.

    Raises:
        ManifestError: the impl is not registered, a referenced file is absent, the class's ``KIND``
            differs from the declared kind, or a protocol method of the kind is missing.
    """
    cls = registry.get(spec.impl)
    if cls is None:
        raise ManifestError(f"component {spec.id!r}: impl {spec.impl!r} is not registered")
    missing = [p for p in spec.files if p not in harness.files]
    if missing:
        raise ManifestError(f"component {spec.id!r}: referenced file(s) missing: {', '.join(missing)}")
    kind = getattr(cls, "KIND", None)
    if kind != spec.kind:
        raise ManifestError(
            f"component {spec.id!r} declares kind {spec.kind!r} but {spec.impl} has KIND {kind!r}"
        )
    absent = [m for m in PROTOCOL_METHODS.get(spec.kind, ()) if not callable(getattr(cls, m, None))]
    if absent:
        raise ManifestError(
            f"component {spec.id!r}: {spec.impl} lacks the {spec.kind} method(s) {', '.join(absent)}"
        )
    return cls


def instantiate(harness: Harness, registry: Mapping[str, type] | None = None) -> list[Component]:
    """New instances of the enabled components, in manifest order (call once per turn).

    No impl is imported dynamically: classes come only from ``registry`` (default
    ``rsi_common.kernel.components.REGISTRY``). Every component is checked before any is created;
    each instance is ``cls(spec, harness.files_of(spec.id))``.

    Raises:
        ManifestError: a check of :func:`check_component` fails.
    """
    reg = default_registry() if registry is None else registry
    checked = [(spec, check_component(spec, harness, reg)) for spec in harness.manifest.enabled_components()]
    return [cls(spec, harness.files_of(spec.id)) for spec, cls in checked]
