"""The proposer's action protocol (docs/formats.md §6.1) with a scripted model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsi_common.errors import ModelTransientError
from rsi_common.harness import h0, workspace_of
from rsi_common.kernel.components import KNOWN_IMPLS
from rsi_common.kinds import K_ENABLED_PRODUCTION
from rsi_common.llm import ModelRequest
from rsi_worker.consolidate.draft import DraftContext
from rsi_worker.roles import proposer as proposer_mod
from rsi_worker.roles.proposer import MAX_TURNS, Proposal, ProposerSetup, propose, validate_candidate
from tests.unit.roles.helpers import Scripted, edit

H0_MANIFEST = workspace_of(h0())["manifest.json"]
BLOCK_OLD = '"extra_blocks": []'
BLOCK_NEW = '"extra_blocks": ["When you compare options, present them as a markdown table."]'
ADD_BLOCK = {"action": "edit_file", "path": "manifest.json", "old": BLOCK_OLD, "new": BLOCK_NEW}


def run(replies: list[Any], *, views: tuple[Any, ...] = (), b_t: int = 3, repair: bool = False,
        workspace: dict[str, str] | None = None,
        **setup_kw: Any) -> tuple[Proposal, Scripted, dict[str, str]]:
    model = Scripted(replies)
    ws = workspace if workspace is not None else workspace_of(h0())
    setup = ProposerSetup(h0(), views, b_t, setup_kw.pop("enabled", K_ENABLED_PRODUCTION), **setup_kw)
    result = propose(model, ws, setup, system="SYSTEM", user="CONTEXT", repair=repair)
    return result, model, ws


def last_result(model: Scripted) -> str:
    """The tool's answer to the model's last reply (it is in the next request)."""
    return model.results()[-1]


def results_of(replies: list[Any], **kw: Any) -> list[str]:
    """Answers to each reply (the run ends by max_turns or the last reply repeating)."""
    _, model, _ = run([*replies, {"action": "abort"}], **kw)
    return model.results()


# --- actions ------------------------------------------------------------------------------------


def test_list_and_read_files() -> None:
    out = results_of([{"action": "list_files"}, {"action": "read_file", "path": "manifest.json"},
                      {"action": "read_file", "path": "nope.md"}])
    assert out[0] == "[list_files] ok\nmanifest.json"
    assert out[1] == "[read_file] ok\n" + H0_MANIFEST
    assert out[2].startswith("[read_file] error: no file 'nope.md'")


def test_list_components_catalogue() -> None:
    enabled = tuple(k for k in K_ENABLED_PRODUCTION if k != "skill")
    out = results_of([{"action": "list_components"}], enabled=enabled)[0]
    assert out.startswith("[list_components] ok\n")
    for impl in KNOWN_IMPLS:
        assert impl in out
    skills = out.split("rsi_common.kernel.components.skills:SkillLibraryComponent", 1)[1]
    assert "kind: skill (kind not enabled in this harness)" in skills
    assert "param header = " in skills
    prompt = out.split("rsi_common.kernel.components.prompt:SystemPromptComponent", 1)[1]
    assert "used by: prompt.system" in prompt and "param extra_blocks = []" in prompt
    assert "params set in prompt.system:" in prompt


def test_traces(ctx: DraftContext) -> None:
    views = tuple(ctx.views)
    wid = views[0].world.id
    out = results_of([{"action": "list_traces"}, {"action": "read_trace", "task_id": wid},
                      {"action": "read_trace", "task_id": wid, "from_step": 2, "to_step": 3},
                      {"action": "read_trace", "task_id": "w_missing"},
                      {"action": "read_trace", "task_id": wid, "from_step": "x"}], views=views)
    assert out[0].splitlines()[1].startswith(f"{wid} | score 0.00 | failed implicit_correction |")
    assert len(out[0].splitlines()) == 1 + len(views)
    assert out[1].startswith(f"[read_trace] ok\nWORLD {wid}") and "[FAIL] (implicit_correction)" in out[1]
    assert "[step 1] AGENT:" in out[1]
    assert "[step 1] AGENT:" not in out[2] and "FINAL ANSWER" in out[2]
    assert out[3].startswith("[read_trace] error: unknown task_id 'w_missing'")
    assert out[4] == "[read_trace] error: from_step must be an integer"


def test_edit_file_rules() -> None:
    out = results_of([
        ADD_BLOCK,
        {"action": "edit_file", "path": "manifest.json", "old": "no such text", "new": "x"},
        {"action": "edit_file", "path": "manifest.json", "old": "true", "new": "false"},
        {"action": "edit_file", "path": "manifest.json", "old": "h0", "new": "h0"},
        {"action": "edit_file", "path": "missing.md", "old": "a", "new": "b"},
        {"action": "edit_file", "path": "manifest.json", "old": "", "new": "b"},
    ])
    assert out[0] == "[edit_file] ok\nmanifest.json edited (1 change(s) so far)"
    assert "'old' occurs 0 times" in out[1]
    assert "occurs" in out[2] and "must occur exactly once" in out[2]
    assert "'new' equals 'old'" in out[3]
    assert "no file 'missing.md'" in out[4]
    assert "non-empty string 'old'" in out[5]


def test_write_file_rules() -> None:
    result, _, ws = run([
        {"action": "write_file", "path": "skills/x/SKILL.md", "content": "Cite the query.\n"},
        {"action": "write_file", "path": "skills/x/SKILL.md", "content": "again"},
        {"action": "write_file", "path": "tool.py", "content": "print(1)"},
        {"action": "write_file", "path": "notes.txt", "content": 3},
        {"action": "abort"},
    ])
    assert ws["skills/x/SKILL.md"] == "Cite the query.\n" and "tool.py" not in ws
    messages = [entry["message"] for entry in result.log]
    assert messages[0].startswith("skills/x/SKILL.md written (1 change(s) so far)")
    assert "write_file creates new files only" in messages[1]
    assert "must end with .json, .md, .txt" in messages[2]
    assert "needs a string 'content'" in messages[3]


@pytest.mark.parametrize("path", ["../x.md", "/etc/passwd", "a//b.md", "a/./b.md", "a\\b.md", "", None])
def test_path_traversal_refused(path: Any) -> None:
    out = results_of([{"action": "read_file", "path": path},
                      {"action": "write_file", "path": path, "content": "x"},
                      {"action": "edit_file", "path": path, "old": "a", "new": "b"}])
    for text in out[:3]:
        assert "] error: " in text and "path" in text


def test_abort_three_times_answered_fourth_ends() -> None:
    result, model, _ = run([{"action": "abort"}])
    assert result.status == "abort" and len(model.requests) == 4
    assert all(r.startswith("[abort] error: there is no abort action") for r in model.results())


def test_max_turns() -> None:
    result, model, _ = run([{"action": "list_files"}])
    assert result.status == "max_turns" and len(model.requests) == MAX_TURNS == 40
    assert "max_turns" in result.reason


def test_unparseable_replies_answered_and_counted() -> None:
    result, model, _ = run(["I think I will edit the prompt.", '{"no_action": 1}', ADD_BLOCK,
                            {"action": "done", "summary": "s", "edits": [edit()]}])
    assert result.status == "done" and len(model.requests) == 4
    out = model.results()
    assert out[0] == out[1] == '[reply] error: the reply is not one JSON object with a string "action"'
    assert [e["ok"] for e in result.log] == [False, False, True, True]


def test_unknown_action_and_fenced_json() -> None:
    out = results_of(["```json\n{\"action\": \"list_files\"}\n```", {"action": "delete_file", "path": "x"}])
    assert out[0].startswith("[list_files] ok")
    assert out[1] == "[delete_file] error: unknown action 'delete_file'"


def test_result_caps() -> None:
    big = {"manifest.json": H0_MANIFEST, "big.txt": "x" * 200_000}
    out = results_of([{"action": "read_file", "path": "big.txt"}, {"action": "n" * 10_000}], workspace=big)
    assert len(out[0]) == 150_000 and out[0].endswith("characters cut]")
    assert len(out[1]) == 4_000 and out[1].startswith("[nnnn")


def test_edit_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proposer_mod, "MAX_EDITS", 1)
    out = results_of([ADD_BLOCK, {"action": "write_file", "path": "a.md", "content": "x"}])
    assert "limit of 1 file changes is reached" in out[1]


def test_one_request_per_reply_with_growing_messages() -> None:
    _, model, _ = run([{"action": "list_files"}, {"action": "list_files"}, {"action": "abort"}])
    assert [len(r.messages) for r in model.requests[:3]] == [1, 3, 5]
    first: ModelRequest = model.requests[0]
    assert first.system == "SYSTEM" and first.cache_points == ["system"]
    assert first.messages == [{"role": "user", "content": "CONTEXT"}]
    reply = {"role": "assistant", "content": [{"type": "text", "text": '{"action": "list_files"}'}]}
    assert model.requests[1].messages[1] == reply


def test_model_error_ends_the_run() -> None:
    def boom(_request: ModelRequest) -> str:
        raise ModelTransientError("overloaded")

    result, _, _ = run([boom])
    assert result.status == "error" and result.reason == "model error: ModelTransientError: overloaded"


# --- done ---------------------------------------------------------------------------------------


def done(*edits: dict[str, Any], summary: str = "") -> dict[str, Any]:
    return {"action": "done", "summary": summary, "edits": list(edits)}


def test_done_success_output() -> None:
    e1 = edit("E1", "Prompt", hypothesis="tables help comparisons")
    e2 = edit("E2", "prompt", hypothesis="one-line recommendations", targets_mode="missing-one_line_reco",
              mechanism="an instruction")
    result, _, ws = run([ADD_BLOCK, done(e1, e2)])
    assert result.status == "done" and result.n_edits == 1
    assert [e["component"] for e in result.edits] == ["prompt", "prompt"]
    assert result.edits[0]["mechanism"] == "tables help comparisons"
    assert result.edits[1]["mechanism"] == "an instruction"
    assert result.mechanism == "tables help comparisons; one-line recommendations"
    assert result.targets_mode == "missing-table; missing-one_line_reco"
    assert json.loads(ws["manifest.json"])["components"][0]["params"]["extra_blocks"]
    out = result.to_json()
    assert list(out) == ["status", "summary", "edits", "mechanism", "targets_mode", "n_edits", "log"]
    result, _, _ = run([ADD_BLOCK, done(e1, summary="x" * 300)])
    assert result.mechanism == "x" * 200


def test_done_validation_in_order() -> None:
    broken = {"action": "edit_file", "path": "manifest.json", "old": '"name": "h0"', "new": '"name": h0'}
    script = [
        done(edit(), edit("E2"), edit("E3"), edit("E4"), {"id": "E5"}),  # 1: nothing changed yet
        ADD_BLOCK,
        done(),  # 2: changed, no edits
        done(edit(), edit("E2"), edit("E3"), edit("E4")),  # 3: over budget
        done({**edit(), "retroactive_check": " "}),  # 4: lacks a field
        done({**edit(), "predicted_affected": "w_1"}),  # 4: not a list
        done({**edit(), "hypothesis": ["a"], "addresses": "prompt.system"}),  # 4: wrong types
        done(edit(component="subagent")),  # 5: not enabled
        {"action": "write_file", "path": "notes.md", "content": "x"},
        done(edit()),  # 7: orphan file
        broken,
        done(edit()),  # 7: manifest does not load
    ]
    out = results_of(script)
    dones = [r for r in out if r.startswith("[done]")]
    assert "edits are declared but no file change succeeded" in dones[0]
    assert "files were changed but 'edits' is empty" in dones[1]
    assert "4 independent edits declared; make AT MOST 3 independent edit(s)." in dones[2]
    assert "lacks required field(s): retroactive_check" in dones[3]
    assert "lacks required field(s): predicted_affected (a list of world ids)" in dones[4]
    assert "wrong type: hypothesis, addresses (a list of strings)" in dones[5]
    assert "component 'subagent', not an enabled kind" in dones[6]
    assert "orphan file(s) that no component lists: notes.md" in dones[7]
    assert "the manifest does not load" in dones[8]


def test_done_reserved_slot_rule() -> None:
    out = results_of([ADD_BLOCK, done(edit(component="prompt"))], reserved_slot=True, untried=("skill",))
    assert "holds a reserved exploration slot" in out[1] and "(skill)" in out[1]
    result, _, _ = run([ADD_BLOCK, done(edit(component="skill"))], reserved_slot=True, untried=("skill",))
    assert result.status == "done"


def test_done_repair_mode_allows_edits_without_change() -> None:
    ws = workspace_of(h0())
    ws["manifest.json"] = ws["manifest.json"].replace(BLOCK_OLD, BLOCK_NEW)
    result, _, _ = run([done(edit())], repair=True, workspace=ws)
    assert result.status == "done" and result.n_edits == 0
    out = results_of([done()], repair=True, workspace=dict(ws))
    assert "files were changed but 'edits' is empty" in out[0]


def _with(component: dict[str, Any] | None = None, **top: Any) -> dict[str, str]:
    manifest = json.loads(H0_MANIFEST)
    if component is not None:
        manifest["components"].append(component)
    manifest.update(top)
    return {"manifest.json": json.dumps(manifest, indent=2) + "\n"}


def test_validate_candidate_checks() -> None:
    inc = h0()
    assert validate_candidate(workspace_of(inc), inc) == []
    assert validate_candidate({"manifest.json": "{"}, inc)[0].startswith("the manifest does not load")
    listed = _with({"id": "skills.library", "kind": "skill",
                    "impl": "rsi_common.kernel.components.skills:SkillLibraryComponent",
                    "files": ["skills/a/SKILL.md"]})
    assert validate_candidate(listed, inc) == ["listed file(s) missing from the workspace: skills/a/SKILL.md"]
    bogus = _with({"id": "config.x", "kind": "config", "impl": "rsi_common.kernel.components.nope:Nope"})
    assert validate_candidate(bogus, inc)[0].startswith("the components do not instantiate: ManifestError")
    locked = _with(locked=["*.params.model"])
    assert validate_candidate(locked, inc) == ["touch violation: platform field locked changed"]
    kinds = _with(enabled_kinds=[*K_ENABLED_PRODUCTION, "subagent"])
    assert validate_candidate(kinds, inc) == ["touch violation: platform field enabled_kinds changed"]
    manifest = json.loads(H0_MANIFEST)
    manifest["components"][2]["params"]["max_iterations"] = 5
    limit = {"manifest.json": json.dumps(manifest, indent=2) + "\n"}
    assert validate_candidate(limit, inc) == [
        "touch violation: locked address control.standard.params.max_iterations changed"]
