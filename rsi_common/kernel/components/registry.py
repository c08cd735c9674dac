"""The component registry (docs/formats.md §5.1, §5.5): the one list of classes a harness may name.

:data:`REGISTERED` is the only source. Everything else is derived from it:

* the **impl string** of a class is its module and name, ``"<module>:<Class>"`` (:func:`impl_of`);
  a manifest names a component by it (``rsi_common.harness`` only checks its form);
* the **kind** is the class's ``KIND`` (:data:`KNOWN_IMPLS` maps impl → kind);
* the **hook methods** a class of a kind must define are the methods of the kind's protocol in
  :mod:`~rsi_common.kernel.components.protocols` (:data:`PROTOCOL_METHODS`).

:func:`instantiate` turns a harness into component instances through this registry; no impl is
ever imported by name, so a harness can only name these classes.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from rsi_common.errors import ManifestError
from rsi_common.harness import ComponentSpec, Harness
from rsi_common.kernel.components.base import Component
from rsi_common.kernel.components.config import PromptCacheComponent
from rsi_common.kernel.components.context import StandardContextComponent
from rsi_common.kernel.components.control import StandardControlComponent
from rsi_common.kernel.components.memory import ArchiveMemoryComponent
from rsi_common.kernel.components.output import ParseOutputComponent
from rsi_common.kernel.components.prompt import SystemPromptComponent
from rsi_common.kernel.components.protocols import KIND_HOOKS
from rsi_common.kernel.components.skills import SkillLibraryComponent
from rsi_common.kernel.components.tools import ToolExposureComponent

__all__ = [
    "KNOWN_IMPLS",
    "PROTOCOL_METHODS",
    "REGISTERED",
    "REGISTRY",
    "check_component",
    "effective_params",
    "hook_methods",
    "impl_of",
    "instantiate",
]

REGISTERED: tuple[type[Component], ...] = (
    SystemPromptComponent,
    StandardContextComponent,
    StandardControlComponent,
    ParseOutputComponent,
    ToolExposureComponent,
    ArchiveMemoryComponent,
    PromptCacheComponent,
    SkillLibraryComponent,
)
"""The registered component classes: the seven of H0 plus the skill library (no ``subagent`` impl)."""


def impl_of(cls: type) -> str:
    """The impl string of a component class: ``"<module>:<qualified name>"``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def hook_methods(protocol: type) -> tuple[str, ...]:
    """The methods a hook protocol declares, in declaration order (private names left out)."""
    return tuple(name for name, member in vars(protocol).items()
                 if inspect.isfunction(member) and not name.startswith("_"))


PROTOCOL_METHODS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {kind: hook_methods(protocol) for kind, protocol in KIND_HOOKS.items()}
)
"""Kind → the methods a component class of that kind must define (checked by :func:`instantiate`)."""

REGISTRY: Mapping[str, type[Component]] = MappingProxyType({impl_of(cls): cls for cls in REGISTERED})
"""Impl string → component class."""

KNOWN_IMPLS: Mapping[str, str] = MappingProxyType({impl: cls.KIND for impl, cls in REGISTRY.items()})
"""Impl string → kind."""


def effective_params(spec: ComponentSpec) -> dict[str, Any]:
    """The top-level params a component of ``spec`` runs with: its class's ``PARAMS`` catalog
    defaults, overridden by the params the manifest sets (just those params for an unknown impl)."""
    cls = REGISTRY.get(spec.impl)
    defaults = {key: default for key, (default, _doc) in cls.PARAMS.items()} if cls is not None else {}
    return {**defaults, **dict(spec.params)}


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

    Classes come only from ``registry`` (default :data:`REGISTRY`). Every component is checked
    before any is created; each instance is ``cls(spec, harness.files_of(spec.id))``.

    Raises:
        ManifestError: a check of :func:`check_component` fails.
    """
    reg = REGISTRY if registry is None else registry
    checked = [(spec, check_component(spec, harness, reg)) for spec in harness.manifest.enabled_components()]
    return [cls(spec, harness.files_of(spec.id)) for spec, cls in checked]
