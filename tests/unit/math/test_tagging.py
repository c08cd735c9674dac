"""Component-tag normalisation (docs/algorithm/formulas.md §2.7, docs/check-vectors.md §9.8), attribution
(§2.8) and units (§2.12)."""

from __future__ import annotations

import re

import pytest

from rsi_common.math import (
    GENERIC_SIGNALS,
    Edit,
    beta1_from_allowance,
    classify_diff,
    delta_from_units,
    has_evidence,
    normalize_component,
    text_only,
    ws_from_unit_weight,
)
from rsi_common.math import attribute as attribute_fn
from tests.unit.math.helpers import ev_of

SKILL_DIFF = (
    "diff --git a/harness/skills/x/SKILL.md b/harness/skills/x/SKILL.md\n"
    "new file mode 100644\n"
    "--- /dev/null\n"
    "+++ b/harness/skills/x/SKILL.md\n"
    "@@ -0,0 +1 @@\n"
    "+Always cite the query behind a number.\n"
)
USE_IT_DIFF = (
    "diff --git a/x/skills/y/SKILL.md b/x/skills/y/SKILL.md\n"
    "new file mode 100644\n"
    "--- /dev/null\n"
    "+++ b/x/skills/y/SKILL.md\n"
    "@@ -0,0 +1 @@\n"
    "+Use it.\n"
)
RESUM_DIFF = "--- a/resum.py\n+++ b/resum.py\n@@ -1 +1 @@\n-keep_last = 3\n+keep_last = 5\n"


def _addr_signals(kind: str, *component_ids: str) -> dict[str, list[str]]:
    return {kind: [rf"(?m)^\+{re.escape(c)}(?:\.|$)" for c in component_ids]}


def test_diff_based_vectors() -> None:
    assert normalize_component("Skill", [], "", {}) == "prompt"
    assert normalize_component("Skill", [], USE_IT_DIFF, {}) == "skill"
    assert normalize_component("bogus", [], SKILL_DIFF, {}) == "skill"
    assert normalize_component(None, [], RESUM_DIFF, {"context_mgmt": [r"resum\.py"]}) == "context_mgmt"
    assert normalize_component(None, [], "nothing structural") == "prompt"
    assert text_only('+ "Be brief."\n+# note\n') is True


def test_address_based_vectors() -> None:
    assert normalize_component("prompt", ["memory"], "+memory.archive.params.archive",
                               _addr_signals("memory", "memory.archive")) == "memory"
    assert normalize_component("skill", ["prompt"], "+prompt.system.params.extra_blocks",
                               _addr_signals("prompt", "prompt.system")) == "prompt"
    adds = "+skills.library\n+skills.library.files.skills/cite/SKILL.md"
    assert normalize_component("Skill", ["skill"], adds, _addr_signals("skill", "skills.library")) == "skill"
    assert normalize_component("config", ["client_tool"], "+tools.exposure.params.executor",
                               _addr_signals("client_tool", "tools.exposure")) == "client_tool"


def test_rules_in_order() -> None:
    # rule 2: declared kind with evidence wins over a single touched kind
    assert normalize_component("memory", ["prompt"], "+x = Memory(3)\n") == "memory"
    # rule 3: text-only diff -> prompt even with one touched kind
    assert normalize_component("bogus", ["config"], '+"text"\n') == "prompt"
    # rule 5 with two touched kinds: classify_diff
    assert normalize_component(None, ["config", "memory"], "+register_tool(x)\n") == "client_tool"
    # unknown touched kinds are ignored
    assert normalize_component(None, ["banana"], "+nothing\n") == "prompt"
    assert normalize_component("  CONFIG ", ["config"], "") == "config"


def test_text_only() -> None:
    assert text_only("") is False
    assert text_only("+++ b/x\n--- a/x\n") is False
    assert text_only("+   \n-\n") is False  # blank changed lines are not changed lines
    assert text_only("-# old\n+f'new {x}'\n+  'y'\n+B\"z\"\n") is True
    assert text_only("+x = 'y'\n") is False
    assert text_only("+'a'\n context line\n+b\n") is False


def test_classify_and_evidence_order() -> None:
    diff = "+self.remember(x)\n+register_tool(y)\n"
    assert classify_diff(diff) == "memory"
    assert classify_diff(diff, {"client_tool": ["register_tool"]}) == "client_tool"
    assert classify_diff('+"only text"\n', {"memory": ["only"]}) == "prompt"
    assert has_evidence("skill", "+upload_skills()\n") and not has_evidence("prompt", "+anything\n")
    assert has_evidence("prompt", "+anything\n", {"prompt": ["any"]})
    assert list(GENERIC_SIGNALS) == ["memory", "skill", "client_tool", "subagent"]
    with pytest.raises(ValueError):
        classify_diff("+x\n", {"memory": ["(unclosed"]})


# --- docs/algorithm/formulas.md §2.8 attribution
# ---------------------------------------------------------------------------


def test_attribute() -> None:
    inc = ev_of({"w1": [0, 0], "w2": [1, 1], "w3": [1, 0], "w4": [1, 1]})
    cand = ev_of({"w1": [1, 0], "w2": [0, 0], "w3": [1, 0], "w4": [0.5, 1]})
    edit = Edit("E1", "prompt", "h" * 200, predicted_affected=("w1", "w3", "w9", 5))
    row = attribute_fn(edit, inc, cand, 2, t=3, variant="A")
    assert row.hypothesis == "h" * 160 and row.edit_id == "E1" and (row.t, row.variant) == (3, "A")
    assert row.n_predicted == 2 and row.predicted_hit == ("w1",) and row.hit_rate == 0.5
    assert row.unpredicted_regressions == ("w2",)  # w4 dropped 0.25 < threshold 0.5
    strict = attribute_fn(edit, inc, cand, 2, t=3, variant="A", threshold=0.25, partial=True)
    assert strict.unpredicted_regressions == ("w2", "w4") and strict.partial
    none = attribute_fn(Edit("E2", None, None), inc, cand, 2, t=None, variant="B")
    assert none.hit_rate is None and none.n_predicted == 0 and none.hypothesis == "None"
    many_inc = ev_of({f"w{i}": [1, 1] for i in range(20)})
    many_cand = ev_of({f"w{i}": [0, 0] for i in range(20)})
    row = attribute_fn(Edit("E3"), many_inc, many_cand, 1, t=0, variant="A")
    assert len(row.unpredicted_regressions) == 12
    with pytest.raises(ValueError):
        attribute_fn(edit, inc, cand, 2, t=3, variant="A", threshold=-0.1)


# --- docs/algorithm/formulas.md §2.12 units
# --------------------------------------------------------------------------------


def test_units() -> None:
    assert delta_from_units(3, 178) == pytest.approx(0.01685, abs=5e-6)
    assert beta1_from_allowance(0.25, 178) == 44.5
    assert ws_from_unit_weight(0.1, 14140) == pytest.approx(1414.0, rel=1e-9)
    assert delta_from_units(1, 14) == 1 / 14
    for f in (delta_from_units, beta1_from_allowance, ws_from_unit_weight):
        with pytest.raises(ValueError):
            f(1, 0)
        with pytest.raises(ValueError):
            f(1, -3)
        with pytest.raises(ValueError):
            f(float("nan"), 3)
