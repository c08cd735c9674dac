"""Tagging from manifests (docs/formats.md §6.3) and the address-based vectors 6–9 of
docs/check-vectors.md §9.8."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from rsi_common.errors import ManifestError
from rsi_common.harness import Touch, build_harness, covers, h0, normalize_edits, touched, workspace_of

from .helpers import SKILL_IMPL, SKILL_PATH, SKILL_TEXT, comp, h0_obj, with_skill


def ws_from(obj: dict[str, Any], files: dict[str, str] | None = None) -> dict[str, str]:
    """A candidate workspace holding ``obj`` as manifest.json plus ``files``."""
    return {"manifest.json": json.dumps(obj, indent=2) + "\n", **(files or {})}


def skill_ws() -> dict[str, str]:
    return ws_from(with_skill(), {SKILL_PATH: SKILL_TEXT})


def test_no_change_no_touch() -> None:
    ts = touched(h0(), workspace_of(h0()))
    assert ts.touches == () and ts.violations == () and ts.orphans == () and ts.ok and ts.kinds == ()


def test_add_component_with_its_files() -> None:
    ts = touched(h0(), skill_ws())
    assert ts.touches == (
        Touch("skills.library", "skills.library", "skill", "add_component"),
        Touch(f"skills.library.files.{SKILL_PATH}", "skills.library", "skill", "add_file"),
    )
    assert ts.kinds == ("skill",) and ts.ok
    assert ts.address_diff() == f"+skills.library\n+skills.library.files.{SKILL_PATH}"
    assert ts.signals() == {"skill": [r"(?m)^\+skills\.library(?:\.|$)"]}


def test_remove_component_and_kind_or_impl_change() -> None:
    inc = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})
    ts = touched(inc, workspace_of(h0()))
    assert [(t.op, t.address, t.kind) for t in ts.touches] == [
        ("remove_component", "skills.library", "skill")
    ]
    obj = h0_obj()
    comp(obj, "config.prompt_cache")["impl"] = "rsi_common.kernel.components.config:OtherCache"
    ts = touched(h0(), ws_from(obj))
    assert [(t.op, t.address) for t in ts.touches] == [
        ("remove_component", "config.prompt_cache"),
        ("add_component", "config.prompt_cache"),
    ]


def test_enable_and_disable() -> None:
    obj = h0_obj()
    comp(obj, "memory.archive")["enabled"] = False
    ts = touched(h0(), ws_from(obj))
    assert ts.touches == (Touch("memory.archive.enabled", "memory.archive", "memory", "disable"),)
    back = touched(build_harness(obj, {}), workspace_of(h0()))
    assert back.touches[0].op == "enable"


def test_param_leaves() -> None:
    obj = h0_obj()
    p = comp(obj, "prompt.system")["params"]
    p["part_overrides"] = {"rules": None}  # key only on the candidate side below an existing dict
    p["extra_blocks"] = ["\n\nBe brief."]  # lists compare whole
    del p["datetime"]  # key only on the incumbent side
    comp(obj, "context.standard")["params"]["retrieval_timeout_s"] = 10  # type change 10.0 -> 10
    comp(obj, "context.standard")["params"]["guard_extra"] = 2048  # unchanged
    ts = touched(h0(), ws_from(obj))
    assert [(t.op, t.address) for t in ts.touches] == [
        ("set", "prompt.system.params.part_overrides.rules"),
        ("set", "prompt.system.params.extra_blocks"),
        ("set", "prompt.system.params.datetime"),
        ("set", "context.standard.params.retrieval_timeout_s"),
    ]
    assert ts.kinds == ("prompt", "context_mgmt")
    assert ts.set_addresses() == [t.address for t in ts.touches]
    assert ts.kinds_for(ts.touches[-1:]) == ("context_mgmt",)


def test_listed_files() -> None:
    inc = build_harness(with_skill(), {SKILL_PATH: SKILL_TEXT})
    obj = with_skill()
    comp(obj, "skills.library")["files"] = [SKILL_PATH, "skills/b/SKILL.md"]
    ts = touched(inc, ws_from(obj, {SKILL_PATH: SKILL_TEXT + "More.\n", "skills/b/SKILL.md": "B\n"}))
    assert [(t.op, t.address) for t in ts.touches] == [
        ("edit_file", f"skills.library.files.{SKILL_PATH}"),
        ("add_file", "skills.library.files.skills/b/SKILL.md"),
    ]
    comp(obj, "skills.library")["files"] = []
    ts = touched(inc, ws_from(obj))
    assert [(t.op, t.address) for t in ts.touches] == [("remove_file", f"skills.library.files.{SKILL_PATH}")]


def test_meta_touches_have_no_kind() -> None:
    obj = h0_obj()
    obj["name"], obj["description"] = "h1", "tuned"
    ts = touched(h0(), ws_from(obj))
    assert ts.touches == (
        Touch("manifest.name", None, None, "meta"),
        Touch("manifest.description", None, None, "meta"),
    )
    assert ts.kinds == () and ts.signals() == {}


def test_locked_set_is_a_violation() -> None:
    obj = h0_obj()
    comp(obj, "control.standard")["params"]["max_iterations"] = 99
    ts = touched(h0(), ws_from(obj))
    assert ts.violations == ("locked address control.standard.params.max_iterations changed",)
    assert not ts.ok


def test_locked_leaf_below_a_new_object_is_a_violation() -> None:
    base = h0_obj()
    base["locked"] = ["*.params.limits.hard"]
    inc = build_harness(base, {})
    obj = json.loads(json.dumps(base))
    comp(obj, "control.standard")["params"]["limits"] = {"hard": 1}
    assert touched(inc, ws_from(obj)).violations == (
        "locked address control.standard.params.limits.hard changed",
    )


def test_added_or_removed_component_with_a_locked_leaf() -> None:
    obj = with_skill()
    comp(obj, "skills.library")["params"] = {"model": "gpt-x"}
    ts = touched(h0(), ws_from(obj, {SKILL_PATH: SKILL_TEXT}))
    assert ts.violations == ("locked address skills.library.params.model changed",)
    ts = touched(build_harness(obj, {SKILL_PATH: SKILL_TEXT}), workspace_of(h0()))
    assert ts.violations == ("locked address skills.library.params.model changed",)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("locked", []),
        (
            "locked",
            ["*.params.model", "*.params.provider", "*.params.credentials", "*.params.max_iterations", "x"],
        ),
        (
            "enabled_kinds",
            [
                "prompt",
                "control_flow",
                "config",
                "output_plumbing",
                "context_mgmt",
                "client_tool",
                "skill",
                "memory",
                "subagent",
            ],
        ),
        ("exploration_policy", {"file": "p.py", "default_beta": 0.4, "W": 4}),
    ],
)
def test_platform_fields_are_violations(field: str, value: Any) -> None:
    obj = h0_obj()
    obj[field] = value
    ts = touched(h0(), ws_from(obj, {"p.py": "x = 1\n"}))
    assert f"platform field {field} changed" in ts.violations


def test_exploration_policy_file_content_is_a_platform_field() -> None:
    obj = h0_obj()
    obj["exploration_policy"] = {"file": "p.py", "default_beta": 0.4, "W": 4}
    inc = build_harness(obj, {"p.py": "x = 1\n"})
    assert touched(inc, workspace_of(inc)).violations == ()
    ts = touched(inc, ws_from(obj, {"p.py": "x = 2\n"}))
    assert ts.violations == ("platform field exploration_policy changed",)
    ts = touched(inc, ws_from(obj))
    assert "missing file p.py (exploration_policy)" in ts.violations


def test_missing_listed_file_is_a_violation() -> None:
    ts = touched(h0(), ws_from(with_skill()))
    assert ts.violations == (f"missing file {SKILL_PATH} (listed by skills.library)",)


def test_orphans() -> None:
    ws = skill_ws()
    ws["notes/todo.md"] = "remember\n"
    ws["skills/other/SKILL.md"] = "unlisted\n"
    ts = touched(h0(), ws)
    assert ts.orphans == ("notes/todo.md", "skills/other/SKILL.md") and not ts.ok
    inc_ws = dict(ws)
    assert touched(inc_ws, ws).orphans == ()  # unchanged unreferenced files are not new


def test_manifest_errors_propagate() -> None:
    obj = h0_obj()
    comp(obj, "memory.archive")["kind"] = "brain"
    with pytest.raises(ManifestError, match="kind 'brain'"):
        touched(h0(), ws_from(obj))
    with pytest.raises(ManifestError, match=re.escape("no manifest.json")):
        touched(h0(), {})


def test_covers_dot_boundary() -> None:
    assert covers("a.params.x", "a.params.x")
    assert covers("a.params", "a.params.x.y") and covers("a.params.x.y", "a.params")
    assert not covers("a.params.x", "a.params.xy") and not covers("a.params.xy", "a.params.x")
    assert covers("skills.library", f"skills.library.files.{SKILL_PATH}")


# --- normalize_edits: docs/check-vectors.md §9.8 address-based vectors
# ---------------------------------------------------


def _edit(component: str | None, addresses: list[str] | None = None, eid: str = "e1") -> dict[str, Any]:
    e: dict[str, Any] = {
        "id": eid,
        "component": component,
        "hypothesis": "h",
        "targets_mode": "corrective",
        "predicted_affected": ["w_1"],
        "retroactive_check": "fixes w_1",
    }
    if addresses is not None:
        e["addresses"] = addresses
    return e


def test_vector_6_rule_4() -> None:
    obj = h0_obj()
    comp(obj, "memory.archive")["params"]["archive"] = False
    ts = touched(h0(), ws_from(obj))
    assert [(t.op, t.address) for t in ts.touches] == [("set", "memory.archive.params.archive")]
    [out] = normalize_edits([_edit("prompt")], ts)
    assert out["component"] == "memory" and out["declared_component"] == "prompt"


def test_vector_7_prose_mentioning_skills_is_not_evidence() -> None:
    obj = h0_obj()
    comp(obj, "prompt.system")["params"]["extra_blocks"] = ["Load skills/ procedures with ReadSkill."]
    ts = touched(h0(), ws_from(obj))
    assert [(t.op, t.address) for t in ts.touches] == [("set", "prompt.system.params.extra_blocks")]
    assert normalize_edits([_edit("skill")], ts)[0]["component"] == "prompt"


def test_vector_8_rule_1() -> None:
    obj = h0_obj()
    obj["components"].append(
        {"id": "skills.library", "kind": "skill", "impl": SKILL_IMPL, "files": ["skills/cite/SKILL.md"]}
    )
    ts = touched(h0(), ws_from(obj, {"skills/cite/SKILL.md": SKILL_TEXT}))
    assert [(t.op, t.address) for t in ts.touches] == [
        ("add_component", "skills.library"),
        ("add_file", "skills.library.files.skills/cite/SKILL.md"),
    ]
    [out] = normalize_edits([_edit("Skill")], ts)
    assert out["component"] == "skill" and out["declared_component"] == "Skill"


def test_vector_9_scope_is_the_edits_own_addresses() -> None:
    obj = h0_obj()
    comp(obj, "tools.exposure")["params"]["executor"] = "partition"
    comp(obj, "prompt.system")["params"]["part_order"] = ["rules"]
    ts = touched(h0(), ws_from(obj))
    assert ts.kinds == ("prompt", "client_tool")
    [out] = normalize_edits([_edit("config", ["tools.exposure.params.executor"])], ts)
    assert out["component"] == "client_tool"


def test_two_edits_each_with_its_own_scope_and_idempotence() -> None:
    obj = h0_obj()
    comp(obj, "tools.exposure")["params"]["executor"] = "partition"
    comp(obj, "prompt.system")["params"]["part_order"] = ["rules"]
    ts = touched(h0(), ws_from(obj))
    edits = [
        _edit("config", ["tools.exposure"], "a"),
        _edit("memory", ["prompt.system.params.part_order"], "b"),
    ]
    out = normalize_edits(edits, ts)
    assert [(e["id"], e["component"], e["declared_component"]) for e in out] == [
        ("a", "client_tool", "config"),
        ("b", "prompt", "memory"),
    ]
    assert normalize_edits(out, ts) == out
    assert edits[0]["component"] == "config"  # inputs are not mutated


def test_addresses_that_cover_nothing_fall_back_to_every_touch() -> None:
    obj = h0_obj()
    comp(obj, "memory.archive")["params"]["retrieve"] = False
    ts = touched(h0(), ws_from(obj))
    assert normalize_edits([_edit("prompt", ["nothing.params.here"])], ts)[0]["component"] == "memory"


def test_domain_signals_come_first_and_merge() -> None:
    obj = h0_obj()
    comp(obj, "memory.archive")["params"]["retrieve"] = False
    comp(obj, "context.standard")["params"]["guard"] = False
    ts = touched(h0(), ws_from(obj))
    # two kinds touched, declared kind without evidence: rule 5 classifies with the signals in order
    out = normalize_edits([_edit("subagent")], ts, domain_signals={"context_mgmt": [r"\+context\."]})
    assert out[0]["component"] == "context_mgmt"
    assert (
        normalize_edits([_edit("subagent")], ts)[0]["component"] == "context_mgmt"
    )  # 𝒦 order of ts.signals()
    out = normalize_edits([_edit("subagent")], ts, domain_signals={"memory": [r"archive"]})
    assert out[0]["component"] == "memory"
