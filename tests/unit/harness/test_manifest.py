"""Every docs/formats.md §5.1 manifest rule has a failing example with a readable message."""

from __future__ import annotations

import re
from typing import Any

import pytest

from rsi_common.errors import ManifestError, PathEscapeError
from rsi_common.harness import SCHEMA, check_path, load_manifest
from rsi_common.kernel.components import KNOWN_IMPLS
from rsi_common.kinds import KINDS

from .helpers import SKILL_PATH, comp, h0_obj, with_skill


def test_h0_loads_with_its_defaults() -> None:
    m = load_manifest(h0_obj())
    assert m.schema == SCHEMA and m.name == "h0" and m.description == "" and m.parent is None
    assert [c.id for c in m.components][:2] == ["prompt.system", "context.standard"]
    assert m.exploration_policy is None
    assert "subagent" not in m.enabled_kinds and len(m.enabled_kinds) == 8
    assert m.component("output.parse").params == {"signal_detector": "regex", "completion_markers": True}
    with pytest.raises(KeyError):
        m.component("nope")


def test_defaults_of_a_minimal_manifest() -> None:
    obj = h0_obj()
    for key in ("name", "enabled_kinds", "locked"):
        del obj[key]
    m = load_manifest(obj)
    assert m.name == "harness" and m.enabled_kinds == KINDS and m.locked == ()
    assert "enabled_kinds" not in m.to_json() and "locked" not in m.to_json()
    c = m.component("memory.archive")
    assert c.files == () and c.enabled and c.description == ""


def test_enabled_kinds_are_kept_in_kind_order() -> None:
    obj = h0_obj()
    obj["enabled_kinds"] = list(reversed(KINDS))
    assert load_manifest(obj).enabled_kinds == KINDS


def _mutate(fn: Any) -> dict[str, Any]:
    obj = h0_obj()
    fn(obj)
    return obj


CASES: list[tuple[str, Any, str]] = [
    ("schema missing", lambda o: o.pop("schema"), "schema must be exactly 'rsi-harness/1'"),
    ("schema other", lambda o: o.update(schema="rsi-harness/2"), "rsi-harness/2"),
    ("unknown field", lambda o: o.update(colour="red"), "unknown manifest field(s): colour"),
    ("name not str", lambda o: o.update(name=3), "'name' must be a string"),
    ("parent not str", lambda o: o.update(parent=5), "'parent' must be a version string or null"),
    ("components not list", lambda o: o.update(components={}), "'components' must be a list"),
    ("empty id", lambda o: comp(o, "output.parse").update(id=""), "needs a non-empty string 'id'"),
    (
        "duplicate id",
        lambda o: comp(o, "memory.archive").update(id="config.prompt_cache"),
        "component id 'config.prompt_cache' is used twice",
    ),
    (
        "id with .params.",
        lambda o: comp(o, "memory.archive").update(id="memory.params.x"),
        "must not contain '.params.' or '.files.'",
    ),
    (
        "id with .files.",
        lambda o: comp(o, "memory.archive").update(id="a.files.b"),
        "must not contain '.params.' or '.files.'",
    ),
    (
        "unknown component field",
        lambda o: comp(o, "memory.archive").update(prams={}),
        "component 'memory.archive' has unknown field(s): prams",
    ),
    (
        "enabled_kinds not a subset",
        lambda o: o.update(enabled_kinds=["prompt", "magic"]),
        "enabled_kinds must be a subset of prompt, control_flow",
    ),
    (
        "kind not in K",
        lambda o: comp(o, "memory.archive").update(kind="brain"),
        "component 'memory.archive' has kind 'brain'",
    ),
    (
        "enabled kind not enabled",
        lambda o: o.update(enabled_kinds=[k for k in o["enabled_kinds"] if k != "memory"]),
        "component 'memory.archive' is enabled but its kind 'memory' is not in enabled_kinds",
    ),
    (
        "impl prefix",
        lambda o: comp(o, "memory.archive").update(impl="os:system"),
        "an impl is 'rsi_common.kernel.components.<module>:<Class>'",
    ),
    (
        "impl without colon",
        lambda o: comp(o, "memory.archive").update(
            impl="rsi_common.kernel.components.memory.ArchiveMemoryComponent"
        ),
        "has impl",
    ),
    (
        "params not object",
        lambda o: comp(o, "memory.archive").update(params=[1]),
        "'params' must be a JSON object",
    ),
    (
        "params NaN",
        lambda o: comp(o, "memory.archive").update(params={"x": float("nan")}),
        "is not a finite JSON number",
    ),
    ("params not JSON", lambda o: comp(o, "memory.archive").update(params={"x": {1, 2}}), "set is not JSON"),
    ("files not list", lambda o: comp(o, "memory.archive").update(files="a.md"), "'files' must be a list"),
    ("file twice", lambda o: comp(o, "memory.archive").update(files=["a.md", "a.md"]), "lists a file twice"),
    (
        "manifest.json referenced",
        lambda o: comp(o, "memory.archive").update(files=["manifest.json"]),
        "may not reference 'manifest.json'",
    ),
    (
        "enabled not bool",
        lambda o: comp(o, "memory.archive").update(enabled="yes"),
        "'enabled' must be true or false",
    ),
    (
        "required kind missing",
        lambda o: comp(o, "context.standard").update(enabled=False),
        "needs at least one enabled 'context_mgmt' component",
    ),
    (
        "required kind absent",
        lambda o: o["components"].remove(comp(o, "prompt.system")),
        "needs at least one enabled 'prompt' component",
    ),
    (
        "two prompts",
        lambda o: o["components"].append(dict(comp(o, "prompt.system"), id="prompt.second")),
        "at most one enabled 'prompt' component is allowed, found 2: prompt.system, prompt.second",
    ),
    (
        "two control flows",
        lambda o: o["components"].append(dict(comp(o, "control.standard"), id="c2")),
        "at most one enabled 'control_flow'",
    ),
    (
        "two output plumbings",
        lambda o: o["components"].append(dict(comp(o, "output.parse"), id="o2")),
        "at most one enabled 'output_plumbing'",
    ),
    (
        "locked not list",
        lambda o: o.update(locked="*.params.model"),
        "'locked' must be a list of non-empty strings",
    ),
    (
        "policy not object",
        lambda o: o.update(exploration_policy="x.py"),
        "'exploration_policy' must be an object",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "message"), CASES, ids=[c[0] for c in CASES])
def test_every_rule_fails_with_a_readable_message(case: str, mutate: Any, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifest(_mutate(mutate))
    assert message in str(info.value), str(info.value)


def test_a_disabled_duplicate_singleton_is_allowed() -> None:
    obj = h0_obj()
    obj["components"].append(dict(comp(obj, "prompt.system"), id="prompt.spare", enabled=False))
    assert len(load_manifest(obj).enabled_components()) == 7


def test_a_disabled_component_of_a_disabled_kind_is_allowed() -> None:
    obj = h0_obj()
    obj["components"].append(
        {"id": "sub", "kind": "subagent", "impl": "rsi_common.kernel.components.x:Y", "enabled": False}
    )
    assert load_manifest(obj).component("sub").enabled is False


def test_not_an_object() -> None:
    with pytest.raises(ManifestError, match="must be a JSON object"):
        load_manifest([])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "path",
    [
        "../x.md",
        "skills/../../x.md",
        "/etc/passwd",
        "skills//x.md",
        "./x.md",
        "skills/.",
        "",
        "a\\b.md",
        "skills/x/",
        "C:/x.md",
        "a\x00b",
    ],
)
def test_path_rules(path: str) -> None:
    obj = with_skill()
    comp(obj, "skills.library")["files"] = [path]
    with pytest.raises(PathEscapeError) as info:
        load_manifest(obj)
    assert "component 'skills.library' file" in str(info.value)
    with pytest.raises(PathEscapeError):
        check_path(path)


def test_exploration_policy_file_must_be_safe() -> None:
    obj = h0_obj()
    obj["exploration_policy"] = {"file": "../policy.py", "default_beta": 0.4, "W": 4}
    with pytest.raises(PathEscapeError, match="exploration_policy file"):
        load_manifest(obj)


def test_good_paths_pass() -> None:
    for p in (SKILL_PATH, "a.md", "dir/.hidden.md", "x..y/z.txt"):
        assert check_path(p) == p


def test_files_argument_checks_presence() -> None:
    with pytest.raises(ManifestError, match=re.escape(f"referenced file(s) missing: {SKILL_PATH}")):
        load_manifest(with_skill(), {})


def test_known_impls_cover_h0_and_the_skill_library() -> None:
    m = load_manifest(h0_obj())
    assert {c.impl: c.kind for c in m.components}.items() <= KNOWN_IMPLS.items()
    assert len(KNOWN_IMPLS) == 8
    assert KNOWN_IMPLS["rsi_common.kernel.components.skills:SkillLibraryComponent"] == "skill"
    assert "subagent" not in KNOWN_IMPLS.values()


def test_to_json_emission_rules() -> None:
    obj = with_skill()
    obj["description"] = "with skills"
    obj["parent"] = "sha256:abc"
    comp(obj, "memory.archive").update(enabled=False, description="off")
    out = load_manifest(obj).to_json()
    assert list(out)[:4] == ["schema", "name", "description", "parent"]
    mem = next(c for c in out["components"] if c["id"] == "memory.archive")
    assert mem["enabled"] is False and mem["description"] == "off"
    skill = next(c for c in out["components"] if c["id"] == "skills.library")
    assert "params" not in skill and skill["files"] == [SKILL_PATH] and "enabled" not in skill
    assert "parent" not in load_manifest(obj).to_json(include_parent=False)
    assert load_manifest(dict(obj, parent="")).parent is None
