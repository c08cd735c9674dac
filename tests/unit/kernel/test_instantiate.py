"""The component registry and instantiate (docs/formats.md §5.1), against the real and fake component
classes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from rsi_common.errors import ManifestError
from rsi_common.harness import IMPL_PREFIX, ComponentSpec, Harness, build_harness, h0
from rsi_common.kernel.components import (
    KNOWN_IMPLS,
    PROTOCOL_METHODS,
    REGISTERED,
    REGISTRY,
    ToolExposureComponent,
    check_component,
    effective_params,
    impl_of,
    instantiate,
)
from rsi_common.kernel.components.protocols import KIND_HOOKS, ToolHooks
from rsi_common.kinds import KINDS
from tests.unit.harness.helpers import SKILL_IMPL, SKILL_PATH, SKILL_TEXT, comp, h0_obj, with_skill


class _Fake:
    KIND = ""

    def __init__(self, spec: ComponentSpec, files: Mapping[str, str]) -> None:
        self.spec = spec
        self.files = dict(files)


def _fake_class(kind: str, *, skip: str | None = None, kind_attr: str | None = None) -> type:
    methods: dict[str, Any] = {m: (lambda self, *a: None) for m in PROTOCOL_METHODS[kind] if m != skip}
    return type(f"Fake_{kind}", (_Fake,), {"KIND": kind if kind_attr is None else kind_attr, **methods})


def fake_registry() -> dict[str, type]:
    return {impl: _fake_class(kind) for impl, kind in KNOWN_IMPLS.items()}


def test_instances_in_manifest_order_with_their_files() -> None:
    h = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})
    first = instantiate(h, fake_registry())
    assert [c.spec.id for c in first] == [c.id for c in h.manifest.components]
    assert first[-1].files == {SKILL_PATH: SKILL_TEXT} and first[0].files == {}
    second = instantiate(h, fake_registry())
    assert all(a is not b for a, b in zip(first, second, strict=True))  # new instances every call


def test_disabled_components_are_not_instantiated() -> None:
    obj = h0_obj()
    comp(obj, "memory.archive")["enabled"] = False
    ids = [c.spec.id for c in instantiate(build_harness(obj, {}), fake_registry())]
    assert "memory.archive" not in ids and len(ids) == 6


def test_unregistered_impl() -> None:
    reg = fake_registry()
    del reg[SKILL_IMPL]
    h = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})
    with pytest.raises(ManifestError, match=re.escape(f"impl {SKILL_IMPL!r} is not registered")):
        instantiate(h, reg)


def test_kind_mismatch() -> None:
    reg = fake_registry()
    reg["rsi_common.kernel.components.memory:ArchiveMemoryComponent"] = _fake_class(
        "memory", kind_attr="config"
    )
    with pytest.raises(ManifestError, match=r"declares kind 'memory' but .* has KIND 'config'"):
        instantiate(h0(), reg)


@pytest.mark.parametrize(
    ("impl", "kind", "method"),
    [(impl, kind, m) for impl, kind in KNOWN_IMPLS.items() for m in PROTOCOL_METHODS[kind]],
)
def test_missing_protocol_method(impl: str, kind: str, method: str) -> None:
    reg = fake_registry()
    reg[impl] = _fake_class(kind, skip=method)
    h = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})
    with pytest.raises(ManifestError, match=f"lacks the {kind} method\\(s\\) {method}"):
        instantiate(h, reg)


def test_missing_file_is_refused_before_any_instance() -> None:
    h = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})
    broken = Harness(h.manifest, {}, h.version)
    with pytest.raises(ManifestError, match=re.escape(f"referenced file(s) missing: {SKILL_PATH}")):
        instantiate(broken, fake_registry())


def test_skill_and_subagent_need_no_method() -> None:
    assert PROTOCOL_METHODS["skill"] == () and PROTOCOL_METHODS["subagent"] == ()


def test_the_kernel_registry_instantiates_every_component() -> None:
    h = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})
    instances = instantiate(h)
    assert [c.id for c in instances] == [c.id for c in h.manifest.components]


# --- the one registry: everything derived from REGISTERED and the hook protocols -------------------


def test_impl_strings_are_module_and_class() -> None:
    assert list(REGISTRY) == [impl_of(cls) for cls in REGISTERED]
    for impl, cls in REGISTRY.items():
        assert impl == f"{cls.__module__}:{cls.__name__}" and impl.startswith(IMPL_PREFIX)
    assert SKILL_IMPL in REGISTRY
    assert set(h0().manifest.components[i].impl for i in range(7)) <= set(REGISTRY)


def test_kinds_come_from_the_classes() -> None:
    assert dict(KNOWN_IMPLS) == {impl: cls.KIND for impl, cls in REGISTRY.items()}
    assert len(set(KNOWN_IMPLS.values())) == len(KNOWN_IMPLS)  # one class per kind today


def test_hook_methods_are_derived_from_the_protocols() -> None:
    assert tuple(KIND_HOOKS) == KINDS
    assert PROTOCOL_METHODS["client_tool"] == ("exposed_tools", "tool_runner_settings")
    assert PROTOCOL_METHODS["context_mgmt"] == ("before_call", "ensure_fits")
    assert all(m in vars(ToolHooks) for m in PROTOCOL_METHODS["client_tool"])
    assert callable(ToolExposureComponent.tool_runner_settings)


def test_every_registered_class_passes_its_own_check() -> None:
    h = h0()
    for impl, cls in REGISTRY.items():
        spec = ComponentSpec(id="c", kind=cls.KIND, impl=impl, params={}, files=(), enabled=True)
        assert check_component(spec, h, REGISTRY) is cls


def test_effective_params_are_catalog_defaults_under_the_manifest() -> None:
    impl = impl_of(ToolExposureComponent)
    spec = ComponentSpec(id="t", kind="client_tool", impl=impl, params={"executor": "sequential"})
    params = effective_params(spec)
    assert params["executor"] == "sequential"
    assert set(params) == set(ToolExposureComponent.PARAMS) | {"executor"}
    unknown = ComponentSpec(id="u", kind="client_tool", impl="x:y", params={"a": 1})
    assert effective_params(unknown) == {"a": 1}
