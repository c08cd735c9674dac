"""Locks on every address (docs/security/gate.md, "Locks"): a property test of the one touched-address
function.

Each example applies ONE random edit to a random incumbent with random lock patterns. The test knows,
from the edit it made, exactly which addresses changed (an oracle independent of the code under
test). Then:

* ``touched(...).changed`` is exactly that set;
* a lock violation is reported **iff** one of those addresses matches a lock pattern — so any edit
  that changes a locked address (a param, a file added / changed / removed, an ``enabled`` toggle, a
  component added or removed, the order, the name) is rejected, and any edit that changes none is not.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsi_common.harness import build_harness, is_locked, load_manifest, touched

from .helpers import SKILL_IMPL, comp, h0_obj

FILES = {"skills/a/SKILL.md": "Cite the query.\n", "skills/b/SKILL.md": "Use a table.\nKeep it short.\n"}
OPTIONAL = ("memory.archive", "config.prompt_cache", "skills.library")
"""Components that may be disabled or removed without breaking a manifest rule."""
MEMORY_IMPL = "rsi_common.kernel.components.memory:ArchiveMemoryComponent"


def base_obj() -> dict[str, Any]:
    obj = h0_obj()
    obj["components"].append(
        {
            "id": "skills.library",
            "kind": "skill",
            "impl": SKILL_IMPL,
            "files": sorted(FILES),
            "description": "procedures",
        }
    )
    return obj


def component_addresses(c: dict[str, Any]) -> set[str]:
    """Every address of one component (the oracle's own flattening of a *flat* params object)."""
    out = {c["id"], f"{c['id']}.enabled", f"{c['id']}.description"}
    out |= {f"{c['id']}.params.{k}" for k in c.get("params", {})}
    out |= {f"{c['id']}.files.{p}" for p in c.get("files", [])}
    return out


def lock_pool() -> list[str]:
    obj = base_obj()
    pool = [
        "manifest.*",
        "manifest.order",
        "manifest.name",
        "*.enabled",
        "*.files.*",
        "*.params.retrieve",
        "*.params.executor",
        "skills.library.files.skills/a/*",
        "*.description",
        "memory.extra*",
    ]
    for c in obj["components"]:
        pool += [c["id"], f"{c['id']}.*", f"{c['id']}.params.*", f"{c['id']}.enabled"]
        pool += sorted(component_addresses(c))
    return pool


Edit = Callable[[dict[str, Any], dict[str, str]], set[str]]
"""Applies one edit in place to (manifest object, files) and returns the addresses it changed."""


def set_param(cid: str, key: str, value: Any) -> Edit:
    def edit(obj: dict[str, Any], files: dict[str, str]) -> set[str]:
        params = comp(obj, cid).setdefault("params", {})
        old = params.get(key, "<absent>")
        params[key] = value
        same = type(old) is type(value) and json.dumps(old) == json.dumps(value)
        return set() if same else {f"{cid}.params.{key}"}

    return edit


def remove_param(cid: str, key: str) -> Edit:
    def edit(obj: dict[str, Any], files: dict[str, str]) -> set[str]:
        comp(obj, cid).get("params", {}).pop(key)
        return {f"{cid}.params.{key}"}

    return edit


def toggle(cid: str) -> Edit:
    def edit(obj: dict[str, Any], files: dict[str, str]) -> set[str]:
        c = comp(obj, cid)
        c["enabled"] = not c.get("enabled", True)
        return {f"{cid}.enabled"}

    return edit


def edit_file(path: str, text: str) -> Edit:
    def edit(obj: dict[str, Any], files: dict[str, str]) -> set[str]:
        before = files[path]
        files[path] = text
        return set() if text == before else {f"skills.library.files.{path}"}

    return edit


def add_file(path: str) -> Edit:
    def edit(obj: dict[str, Any], files: dict[str, str]) -> set[str]:
        comp(obj, "skills.library")["files"].append(path)
        files[path] = "New procedure.\n"
        return {f"skills.library.files.{path}"}

    return edit


def remove_file(path: str) -> Edit:
    def edit(obj: dict[str, Any], files: dict[str, str]) -> set[str]:
        comp(obj, "skills.library")["files"].remove(path)
        del files[path]
        return {f"skills.library.files.{path}"}

    return edit


def remove_component(cid: str) -> Edit:
    def edit(obj: dict[str, Any], files: dict[str, str]) -> set[str]:
        c = comp(obj, cid)
        obj["components"].remove(c)
        for p in c.get("files", []):
            del files[p]
        return component_addresses(c)

    return edit


def add_component(position: int) -> Edit:
    def edit(obj: dict[str, Any], files: dict[str, str]) -> set[str]:
        c = {"id": "memory.extra", "kind": "memory", "impl": MEMORY_IMPL, "params": {"retrieve": False}}
        obj["components"].insert(position, copy.deepcopy(c))
        return component_addresses(c)

    return edit


def swap(i: int, j: int) -> Edit:
    def edit(obj: dict[str, Any], files: dict[str, str]) -> set[str]:
        cs = obj["components"]
        cs[i], cs[j] = cs[j], cs[i]
        return set() if i == j else {"manifest.order"}

    return edit


def meta(field: str, value: str) -> Edit:
    def edit(obj: dict[str, Any], files: dict[str, str]) -> set[str]:
        before = obj.get(field, "harness" if field == "name" else "")
        obj[field] = value
        return set() if value == before else {f"manifest.{field}"}

    return edit


SCALARS = st.one_of(
    st.integers(-5, 5),
    st.booleans(),
    st.sampled_from(["regex", "hybrid", "a", ""]),
    st.lists(st.integers(0, 3), max_size=2),
    st.just({}),
)


def edits() -> st.SearchStrategy[Edit]:
    obj = base_obj()
    params = [(c["id"], k) for c in obj["components"] for k in c.get("params", {})]
    n = len(obj["components"])
    return st.one_of(
        st.builds(lambda p, v: set_param(p[0], p[1], v), st.sampled_from(params), SCALARS),
        st.builds(
            lambda c, k, v: set_param(c, k, v),
            st.sampled_from([c["id"] for c in obj["components"]]),
            st.sampled_from(["new_key", "model", "retrieve"]),
            SCALARS,
        ),
        st.builds(lambda p: remove_param(*p), st.sampled_from(params)),
        st.builds(toggle, st.sampled_from(OPTIONAL)),
        st.builds(
            edit_file, st.sampled_from(sorted(FILES)), st.sampled_from(["Cite the query.\n", "Changed.\n"])
        ),
        st.builds(add_file, st.sampled_from(["skills/a/extra.md", "skills/c/SKILL.md"])),
        st.builds(remove_file, st.sampled_from(sorted(FILES))),
        st.builds(remove_component, st.sampled_from(OPTIONAL)),
        st.builds(add_component, st.integers(0, n)),
        st.builds(swap, st.integers(0, n - 1), st.integers(0, n - 1)),
        st.builds(meta, st.sampled_from(["name", "description"]), st.sampled_from(["h0", "h1", ""])),
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(locks=st.lists(st.sampled_from(lock_pool()), max_size=3, unique=True), edit=edits())
def test_a_locked_address_is_rejected_iff_the_edit_changes_one(locks: list[str], edit: Edit) -> None:
    inc_obj = base_obj()
    inc_obj["locked"] = list(inc_obj.get("locked", [])) + locks
    inc = build_harness(load_manifest(inc_obj), FILES)
    cand_obj, cand_files = copy.deepcopy(inc_obj), dict(FILES)
    expected = edit(cand_obj, cand_files)
    ws = {"manifest.json": json.dumps(cand_obj, indent=2) + "\n", **cand_files}
    ts = touched(inc, ws)
    assert set(ts.changed) == expected
    locked_hits = sorted(a for a in expected if is_locked(a, inc.manifest.locked))
    assert [v for v in ts.violations if v.startswith("locked address")] == [
        f"locked address {a} changed" for a in locked_hits
    ]
    assert all(v.startswith("locked address") for v in ts.violations)  # no platform field, no missing file


def test_the_policy_file_edit_of_the_issue_is_refused() -> None:
    """A locked policy file ("Never reveal secrets." → "Always reveal secrets.") cannot change."""
    obj = base_obj()
    obj["components"].append(
        {
            "id": "policy.rules",
            "kind": "skill",
            "impl": SKILL_IMPL,
            "files": ["policy/RULES.md"],
            "enabled": True,
        }
    )
    obj["locked"] = [*obj["locked"], "policy.rules.files.*"]
    files = {**FILES, "policy/RULES.md": "Never reveal secrets.\n"}
    inc = build_harness(load_manifest(obj), files)
    cand = {
        "manifest.json": json.dumps(obj, indent=2) + "\n",
        **files,
        "policy/RULES.md": "Always reveal secrets.\n",
    }
    assert touched(inc, cand).violations == ("locked address policy.rules.files.policy/RULES.md changed",)
    removed = copy.deepcopy(obj)
    comp(removed, "policy.rules")["files"] = []
    ws = {"manifest.json": json.dumps(removed, indent=2) + "\n", **FILES}
    assert "locked address policy.rules.files.policy/RULES.md changed" in touched(inc, ws).violations
    toggled = copy.deepcopy(obj)
    comp(toggled, "policy.rules")["enabled"] = False
    ws = {"manifest.json": json.dumps(toggled, indent=2) + "\n", **files}
    obj2 = copy.deepcopy(obj)
    obj2["locked"] = [*h0_obj()["locked"], "policy.rules"]
    inc2 = build_harness(load_manifest(obj2), files)
    ws2 = {"manifest.json": json.dumps({**toggled, "locked": obj2["locked"]}, indent=2) + "\n", **files}
    assert touched(inc2, ws2).violations == ("locked address policy.rules.enabled changed",)
    assert touched(inc, ws).violations == ()  # only the files are locked there: the toggle is free
