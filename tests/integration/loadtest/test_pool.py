"""The load test's world pool: generation is deterministic, a worlds file becomes conversations, and
the schedule keeps each conversation's turns in order on one agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi_common.errors import InvalidInput
from rsi_worker.jobs.loadpool import generate_pool, load_pool, rebind
from rsi_worker.jobs.loadtest import LoadConfig, schedule


def test_generated_pool_is_deterministic_by_seed() -> None:
    a, b, c = generate_pool(3, 12), generate_pool(3, 12), generate_pool(4, 12)
    dump = [[dict(t.world) for t in conv.turns] for conv in a]
    assert dump == [[dict(t.world) for t in conv.turns] for conv in b]
    assert dump != [[dict(t.world) for t in conv.turns] for conv in c]
    kinds = {t.kind for conv in a for t in conv.turns}
    assert "request" in kinds and kinds & {"correction", "accept", "new_topic"}


def test_worlds_file_groups_conversations_in_seq_order(tmp_path: Path) -> None:
    pool = generate_pool(1, 6)
    lines = []
    for c, conv in enumerate(pool):
        for n, turn in enumerate(conv.turns, start=1):
            world = rebind(turn, agent_id="src", interaction_id=f"conv{c}", io_id=f"io{c}-{n}", clock=1e9 + n)
            lines.append({"agent_id": "src", "io_id": f"io{c}-{n}", "interaction_id": f"conv{c}", "seq": n,
                          "world": world, "signals": {"stars": 5, "implicit": {"kind": "accept"}}})
    path = tmp_path / "worlds.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in reversed(lines)) + "\n", encoding="utf-8")
    loaded = load_pool(path)
    assert len(loaded) == len(pool)
    for conv in loaded:
        assert [t.world["io_id"] for t in conv.turns] == sorted(t.world["io_id"] for t in conv.turns)
        assert all(dict(t.signals) == {"stars": 5} for t in conv.turns)  # implicit is never sent
    (tmp_path / "bad.jsonl").write_text("{not json\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match=r"bad\.jsonl:1"):
        load_pool(tmp_path / "bad.jsonl")


def test_schedule_keeps_conversations_on_one_agent_in_order() -> None:
    pool = generate_pool(2, 8)
    offers = schedule(pool, LoadConfig(rate=4, duration_s=10, agents=3), "p")
    assert len(offers) == 40 and offers[-1].at_s == pytest.approx(39 / 4)
    by_conv: dict[str, list[int]] = {}
    for o in offers:
        assert o.agent_id == o.interaction_id.rsplit("-c", 1)[0]
        by_conv.setdefault(o.interaction_id, []).append(o.index)
    for conv, indices in by_conv.items():
        assert indices == sorted(indices), conv
    first = [o.turn.kind for o in offers if o.interaction_id == "p-0-c0"]
    assert first[0] == "request"
