"""Tree worlds: format, validation naming the field, hostile input, JSON Lines."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rsi_common.errors import InputLimitError, InvalidInput
from rsi_worker.dream.simtasks import SimSearchTask, generate_world
from rsi_worker.dream.tree import MAX_WORLD_BYTES, TreeWorld, dump_lines, load_world, read_lines


def _obj(toy: TreeWorld) -> dict[str, Any]:
    return copy.deepcopy(toy.to_json())


def test_round_trip_and_derived_values(toy: TreeWorld) -> None:
    again = load_world(json.loads(json.dumps(toy.to_json())))
    assert again == toy
    assert toy.n_cells == 6 and toy.floor == 0.30 and toy.best_score == 0.70
    assert [c.id for c in toy.chain(0)] == ["b0a0", "b0a1", "b0a2"]
    assert toy.by_id["b0a1"].parent == "b0a0" and toy.by_id["b1a0"].parent == "r"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda o: o["cells"].append({"branch": 2, "attempt": 2, "seq": 9}), "attempts must be consecutive"),
        (lambda o: o["cells"].append({"branch": 5, "attempt": 1, "seq": 9}), "attempts must be consecutive"),
        (lambda o: o["cells"].append({"branch": 2, "attempt": 0, "seq": 9}), "records attempt 0 twice"),
        (lambda o: o["cells"][1].update(seq=0), "cells[1].seq"),
        (lambda o: o["cells"][3].update(seq=100), "created before its parent"),
        (lambda o: o["cells"][0].update(score=float("nan")), "cells[0].score"),
        (lambda o: o["cells"][0].update(valid="yes"), "cells[0].valid"),
        (lambda o: o["cells"][0].update(branch=-1), "cells[0].branch"),
        (lambda o: o["cells"][0].update(extra=1), "unknown key"),
        (lambda o: o["cells"][0].pop("seq"), "cells[0].seq"),
        (lambda o: o.update(schema="rsi-dream-world/2"), "schema"),
        (lambda o: o.update(world_id="../x"), "world_id"),
        (lambda o: o.update(baseline="0.4"), "baseline"),
        (lambda o: o.update(grid={"branch_count": 1, "refine_count": 0}), "grid"),
        (lambda o: o["cells"][0].update(error="x" * 3000), "cells[0].error"),
    ],
)
def test_each_rule_names_its_field(toy: TreeWorld, edit: Any, field: str) -> None:
    obj = _obj(toy)
    edit(obj)
    with pytest.raises(InvalidInput, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_world(obj)


def test_hostile_input_is_refused_without_echo(toy: TreeWorld) -> None:
    obj = _obj(toy)
    obj["cells"][0]["fail_class"] = "bad\ud800"
    with pytest.raises(InputLimitError, match=r"cells\[0\]\.fail_class") as exc:
        load_world(obj)
    assert "\ud800" not in str(exc.value)
    deep: Any = {}
    cur = deep
    for _ in range(100):
        cur["x"] = {}
        cur = cur["x"]
    obj = _obj(toy)
    obj["meta"] = deep
    with pytest.raises(InputLimitError, match=r"deep|depth|levels"):
        load_world(obj)
    obj = _obj(toy)
    obj["meta"] = {"blob": "y" * (MAX_WORLD_BYTES + 10)}
    with pytest.raises(InputLimitError, match="bytes"):
        load_world(obj)
    obj = _obj(toy)
    obj["cells"][0]["error"] = "a\x00b"
    with pytest.raises(InputLimitError):
        load_world(obj)


def test_json_lines_round_trip_and_bad_lines_reported(toy: TreeWorld) -> None:
    lines = [*dump_lines([toy, generate_world(1, "t-1")]), "", "{not json", json.dumps({"schema": "x"})]
    got = list(read_lines(lines))
    assert [n for n, _ in got] == [1, 2, 4, 5]
    assert got[0][1] == toy
    assert isinstance(got[2][1], InvalidInput) and "line 4" in str(got[2][1])
    assert isinstance(got[3][1], InvalidInput) and "schema" in str(got[3][1])


def test_generator_is_seeded_and_agrees_with_the_live_task() -> None:
    a, b = generate_world(7, "t-3"), generate_world(7, "t-3")
    assert a == b and a != generate_world(8, "t-3")
    task = SimSearchTask(7, "t-3")
    for c in a.cells:
        out = task.evaluate(c.branch, c.attempt)
        assert (out.score, out.valid, out.tokens) == (c.score, c.valid, c.tokens)
        assert (c.score is None) == (not c.valid)
    assert any(not c.valid for c in a.cells) and a.best_score > a.baseline


GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "dream" / "worlds-v1.jsonl"


def test_golden_v1_file_still_reads_and_the_generator_still_draws_it(toy: TreeWorld) -> None:
    """``tests/golden/dream/worlds-v1.jsonl``: the format and the seeded generator may not drift."""
    from rsi_worker.dream.simtasks import SimTaskParams

    got = [w for _, w in read_lines(GOLDEN.read_text(encoding="utf-8").splitlines())]
    assert got[0] == toy
    assert got[1] == generate_world(1, "golden-task", SimTaskParams(branches=3, refine=1))
