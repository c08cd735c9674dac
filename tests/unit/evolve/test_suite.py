"""Suite format and validation (docs/algorithm/evolve.md#suites): every refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest

from rsi_common.errors import InvalidInput
from rsi_worker.evolve.suite import from_jsonl, split_heldout, validate_suite

CHECK = {"kind": "answer_criteria", "name": "t", "criterion": "A better answer does this: use a table"}


def spec(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "s",
        "tasks": [
            {"id": "a", "request": "hi", "checks": [CHECK]},
            {"id": "b", "request": "ho", "checks": [CHECK]},
        ],
        "heldout": ["b"],
    }
    d.update(over)
    return d


def test_a_valid_suite_splits_evolve_and_heldout_and_round_trips() -> None:
    s = validate_suite(spec())
    assert s.evolve_ids == ["a"] and s.heldout_ids == ["b"]
    assert validate_suite(s.to_json()) == s
    det = [{"kind": "contains", "text": "x"}, {"kind": "regex", "pattern": "^a"}]
    s = validate_suite(spec(tasks=[{"id": "a", "request": "hi", "checks": det}], heldout=[]))
    assert validate_suite(s.to_json()) == s  # a stored suite with deterministic checks loads again


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        (
            {"tasks": [{"id": "a", "request": "x", "checks": [CHECK]}] * 2},
            "suite.tasks[1].id",
            "duplicate id",
        ),
        ({"heldout": ["zz"]}, "suite.heldout[0]", "not a task id"),
        (
            {
                "tasks": [{"id": "a", "request": "x", "checks": [{"kind": "regex", "pattern": "("}]}],
                "heldout": [],
            },
            "suite.tasks[0].checks[0].pattern",
            "cannot run",
        ),
        (
            {"tasks": [{"id": "a", "request": "x", "checks": [{"kind": "llm_vibes"}]}], "heldout": []},
            "suite.tasks[0].checks[0].kind",
            "cannot run",
        ),
        (
            {"tasks": [{"id": "a", "request": "x", "checks": []}], "heldout": []},
            "suite.tasks[0].checks",
            "non-empty",
        ),
        (
            {"tasks": [{"id": "a", "request": "x", "world_id": "w", "checks": [CHECK]}], "heldout": []},
            "suite.tasks[0]",
            "exactly one of world_id and request",
        ),
        (
            {
                "tasks": [{"id": "a", "request": "x", "checks": [{"kind": "contains", "text": " "}]}],
                "heldout": [],
            },
            "suite.tasks[0].checks[0].text",
            "empty",
        ),
        ({"heldout": ["a", "b"]}, "suite.heldout", "every task"),
        ({"bogus": 1}, "suite", "unknown key"),
    ],
)
def test_refusals_name_the_field(over: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        validate_suite(spec(**over))
    assert str(exc.value).startswith(field + ":") and words in str(exc.value)


def test_unknown_world_is_refused() -> None:
    d = spec(
        agent="ag",
        tasks=[
            {"id": "a", "world_id": "w1", "checks": [CHECK]},
            {"id": "b", "request": "x", "checks": [CHECK]},
        ],
        heldout=[],
    )
    with pytest.raises(InvalidInput, match=r"suite.tasks\[0\].world_id: unknown world 'w1'"):
        validate_suite(d, world_exists=lambda w: False)
    assert validate_suite(d, world_exists=lambda w: w == "w1").tasks[0].world_id == "w1"
    with pytest.raises(InvalidInput, match=r"needs suite\.agent"):
        validate_suite(spec(agent=None, tasks=[{"id": "a", "world_id": "w1", "checks": [CHECK]}], heldout=[]))


def test_a_credential_is_refused_without_echo() -> None:
    key = "sk-ant-api03-" + "A" * 90
    with pytest.raises(InvalidInput) as exc:
        validate_suite(spec(tasks=[{"id": "a", "request": f"use {key}", "checks": [CHECK]}], heldout=[]))
    assert (
        "credential" in str(exc.value) and key not in str(exc.value) and "tasks[0].request" in str(exc.value)
    )


def test_heldout_split_is_seeded_and_keeps_an_evolve_task() -> None:
    ids = [f"t{i}" for i in range(10)]
    assert split_heldout(ids, 0.3, 7) == split_heldout(ids, 0.3, 7)
    assert len(split_heldout(ids, 0.3, 7)) == 3
    assert split_heldout(ids, 0.3, 7) != split_heldout(ids, 0.3, 8)
    assert len(split_heldout(["a"], 0.9, 1)) == 0
    with pytest.raises(InvalidInput, match="heldout-fraction"):
        split_heldout(ids, 1.0, 7)


def test_jsonl_names_the_bad_line() -> None:
    with pytest.raises(InvalidInput, match="line 2: malformed JSON"):
        from_jsonl("s", ['{"id": "a", "request": "x", "checks": []}', "{nope"])
    with pytest.raises(InvalidInput, match="line 1: nested deeper than 64 levels"):
        deep = '{"x":' * 5000 + "1" + "}" * 5000
        from_jsonl("s", ['{"id": "a", "request": "x", "checks": [' + deep + "]}"])
    s = from_jsonl(
        "s",
        [
            '{"id": "a", "request": "x", "checks": [{"kind": "contains", "text": "x"}]}',
            "",
            '{"id": "b", "request": "y", "checks": [{"kind": "contains", "text": "y"}]}',
        ],
        heldout=["b"],
    )
    assert s.heldout == ("b",)
