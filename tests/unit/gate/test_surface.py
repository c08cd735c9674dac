"""No-op, duplicate and growth-budget checks of the gate (docs/security/gate.md)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from rsi_common.harness import Harness, build_harness, h0, load_manifest
from rsi_worker.gate.added import added_texts
from rsi_worker.gate.surface import instruction_chars, surface, surface_reasons

SKILL_IMPL = "rsi_common.kernel.components.skills:SkillLibraryComponent"
TABLE = "When you compare options, present them as a markdown table."
ONE_LINE = "Keep the recommendation to a single line that starts with 'Recommendation:'."


def harness(blocks: list[Any], *, skill: str | None = None, edit: Any = None) -> Harness:
    obj = h0().manifest.to_json()
    obj["components"][0]["params"]["extra_blocks"] = copy.deepcopy(blocks)
    files: dict[str, str] = {}
    if skill is not None:
        obj["components"].append(
            {"id": "skills.library", "kind": "skill", "impl": SKILL_IMPL, "files": ["skills/t/SKILL.md"]}
        )
        files["skills/t/SKILL.md"] = skill
    if edit is not None:
        edit(obj)
    return build_harness(load_manifest(obj), files)


def reasons(inc: Harness, cand: Harness, max_chars: int = 4000) -> list[str]:
    return surface_reasons(inc, cand, added_texts(inc, cand), max_chars)


INC = harness([TABLE])


@pytest.mark.parametrize(
    ("name", "cand"),
    [
        ("the same block again", harness([TABLE, TABLE])),
        ("re-ordered identical text", harness([TABLE + " " + ONE_LINE], edit=None)),
        ("whitespace and case", harness(["  when you compare options,  PRESENT them as a markdown table"])),
        (
            "a default value set explicitly",
            harness([TABLE], edit=lambda o: o["components"][1]["params"].update(guard=True)),
        ),
        (
            "a renamed component",
            harness([TABLE], edit=lambda o: o["components"][5].update(id="memory.renamed")),
        ),
        (
            "part order only",
            harness(
                [{"id": "x", "text": TABLE}],
                edit=lambda o: o["components"][0]["params"].update(part_order=["x"]),
            ),
        ),
    ],
)
def test_no_ops_are_rejected(name: str, cand: Harness) -> None:
    inc = harness([TABLE, ONE_LINE]) if name == "re-ordered identical text" else INC
    if name == "re-ordered identical text":
        cand = harness([ONE_LINE, TABLE])
    found = reasons(inc, cand)
    assert found and found[0].startswith("no-op"), found


def test_a_skill_restating_a_block_is_a_duplicate() -> None:
    skill = f"---\nname: table\ndescription: {TABLE}\n---\n{TABLE}\n"
    found = reasons(INC, harness([TABLE], skill=skill))
    assert len(found) == 1 and found[0].startswith(
        "duplicate: the text added at skills.library.files.skills/t"
    )


def test_a_duplicate_next_to_a_new_block_is_still_refused() -> None:
    found = reasons(INC, harness([TABLE, "Cite your sources.", TABLE.upper()]))
    assert not found or not found[0].startswith("no-op")
    cand = harness([TABLE, "Cite your sources."], skill=f"---\nname: t\ndescription: {TABLE}\n---\n{TABLE}\n")
    assert any(r.startswith("duplicate") for r in reasons(INC, cand))


def test_real_changes_pass() -> None:
    assert reasons(INC, harness([TABLE, ONE_LINE])) == []
    assert reasons(INC, harness([])) == []  # removing a block is a simplification, judged by replay
    assert reasons(INC, harness(["Present comparisons as a table with one row per option."])) == []
    assert (
        reasons(
            INC, harness([TABLE], edit=lambda o: o["components"][2]["params"].update(repeat_stop_after=4))
        )
        == []
    )


def test_growth_budget() -> None:
    big = harness([TABLE, ONE_LINE])
    size = instruction_chars(surface(big))
    assert reasons(INC, big, max_chars=size) == []
    over = reasons(INC, big, max_chars=size - 1)
    assert over == [
        f"growth budget: the harness would hold {size} characters of instructions (budget "
        f"{size - 1}, now {instruction_chars(surface(INC))}); merge or remove blocks instead of adding"
    ]
    assert reasons(big, INC, max_chars=1) == []  # shrinking is always allowed
