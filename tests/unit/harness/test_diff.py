"""diff_trees (docs/algorithm/consolidation.md §3.9, vector docs/check-vectors.md §9.11) and workspaces."""

from __future__ import annotations

import json

import pytest

from rsi_common.errors import ManifestError
from rsi_common.harness import build_harness, diff_trees, h0, harness_from_workspace, workspace_of

from .helpers import H0_SKILL_VERSION, SKILL_PATH, SKILL_TEXT, with_skill

VECTOR = """diff --git a/harness/manifest.json b/harness/manifest.json
--- a/harness/manifest.json
+++ b/harness/manifest.json
@@ -1,3 +1,3 @@
 {
-  "name": "h0"
+  "name": "h1"
 }
diff --git a/harness/skills/x/SKILL.md b/harness/skills/x/SKILL.md
new file mode 100644
--- /dev/null
+++ b/harness/skills/x/SKILL.md
@@ -0,0 +1 @@
+Cite the query.
"""


def test_spec_vector_exactly() -> None:
    a = {"manifest.json": '{\n  "name": "h0"\n}\n'}
    b = {"manifest.json": '{\n  "name": "h1"\n}\n', "skills/x/SKILL.md": "Cite the query.\n"}
    assert diff_trees(a, b) == VECTOR


def test_added_changed_and_deleted_files() -> None:
    a = {"a.md": "one\ntwo\n", "gone.md": "bye\n", "same.md": "x\n"}
    b = {"a.md": "one\n2\n", "new.md": "hi\n", "same.md": "x\n"}
    d = diff_trees(a, b, prefix="h")
    assert d.splitlines() == [
        "diff --git a/h/a.md b/h/a.md",
        "--- a/h/a.md",
        "+++ b/h/a.md",
        "@@ -1,2 +1,2 @@",
        " one",
        "-two",
        "+2",
        "diff --git a/h/gone.md b/h/gone.md",
        "deleted file mode 100644",
        "--- a/h/gone.md",
        "+++ /dev/null",
        "@@ -1 +0,0 @@",
        "-bye",
        "diff --git a/h/new.md b/h/new.md",
        "new file mode 100644",
        "--- /dev/null",
        "+++ b/h/new.md",
        "@@ -0,0 +1 @@",
        "+hi",
    ]
    assert d.endswith("\n")


def test_empty_new_and_deleted_files_get_headers_only() -> None:
    assert diff_trees({}, {"e.md": ""}) == (
        "diff --git a/harness/e.md b/harness/e.md\nnew file mode 100644\n--- /dev/null\n+++ b/harness/e.md\n"
    )
    assert diff_trees({"e.md": ""}, {}) == (
        "diff --git a/harness/e.md b/harness/e.md\ndeleted file mode 100644\n"
        "--- a/harness/e.md\n+++ /dev/null\n"
    )


def test_identical_trees_give_an_empty_diff() -> None:
    ws = workspace_of(h0())
    assert diff_trees(ws, dict(ws)) == ""


def test_workspace_round_trip() -> None:
    h = build_harness(dict(with_skill(), parent="sha256:p"), {SKILL_PATH: SKILL_TEXT})
    ws = workspace_of(h)
    assert set(ws) == {"manifest.json", SKILL_PATH}
    text = ws["manifest.json"]
    obj = json.loads(text)
    assert text == json.dumps(obj, indent=2, ensure_ascii=False) + "\n" and "parent" not in obj
    again = harness_from_workspace(ws)
    assert again.version == H0_SKILL_VERSION and again.manifest.parent is None


def test_workspace_edit_shows_in_the_diff() -> None:
    ws = workspace_of(h0())
    cand = dict(ws)
    cand["manifest.json"] = ws["manifest.json"].replace('"repeat_stop_after": 3', '"repeat_stop_after": 5')
    d = diff_trees(ws, cand)
    assert '-        "repeat_stop_after": 3,' in d.splitlines()
    assert '+        "repeat_stop_after": 5,' in d.splitlines()
    assert harness_from_workspace(cand).version != h0().version


@pytest.mark.parametrize(
    ("ws", "match"),
    [
        ({}, "no manifest.json"),
        ({"manifest.json": "{"}, "not valid JSON"),
        ({"manifest.json": "[]"}, "JSON object"),
    ],
)
def test_bad_workspaces(ws: dict[str, str], match: str) -> None:
    with pytest.raises(ManifestError, match=match):
        harness_from_workspace(ws)
