"""History summaries, stall and exploration (docs/algorithm/formulas.md §2.5, §2.6,
docs/check-vectors.md §9.6, §9.7)."""

from __future__ import annotations

import math

import pytest

from rsi_common.kinds import K_ENABLED_PRODUCTION, KINDS
from rsi_common.math import (
    Edit,
    EditRecord,
    accepted_counts,
    accepted_edits,
    edit_records,
    exploration,
    exploration_directive,
    measured,
    novelty,
    prune_set,
    recent_yield,
    reserved_variants,
    stall_flag,
    tried,
)


def _records() -> list[EditRecord]:
    rows = edit_records(0, "A", (Edit("C1", "prompt", "h1"),), "ACCEPTED", 0.03, 0.05, True, 0.53, 1000.0)
    rows += edit_records(1, "A", (Edit("E1", "prompt", "h2"),), "REJECTED", -0.01, 0.0, False, 0.52, 1000.0)
    two = (Edit("E1", "skill", "h3"), Edit("E2", "memory", "h4"))
    rows += edit_records(1, "B", two, "REJECTED", -0.02, 0.3, False, 0.51, 1300.0)
    gate = (Edit("E1", "config", "h5"),)
    rows += edit_records(2, "A", gate, "critic_reject", None, None, False, None, None, "leak")
    return rows


def test_tried_and_measured() -> None:
    recs = _records()
    assert tried(recs) == {"prompt", "skill", "memory"}
    assert len(measured(recs)) == 4
    odd = EditRecord(0, "A", "E1", "banana", None, 0.5, 0.0, False, "REJECTED")
    assert tried([odd]) == set()


def test_recent_yield() -> None:
    recs = _records()
    assert recent_yield(recs, 3, 4) == {"memory": -0.02, "prompt": 0.03, "skill": -0.02}
    assert recent_yield(recs, 5, 4)["prompt"] == -0.01  # t0 is outside the window
    assert recent_yield(recs, 6, 4)["prompt"] == -math.inf
    assert recent_yield(recs, 4, 4)["prompt"] == 0.03  # the window includes its edge
    with pytest.raises(ValueError):
        recent_yield(recs, 3, -1)


def test_prune_set() -> None:
    targets = prune_set(_records(), 5, 4)
    assert [p.component for p in targets] == ["memory", "prompt", "skill"]
    prompt = targets[1]
    assert prompt.recent_best_gain == -0.01
    assert [a.hypothesis for a in prompt.accepted_edits_in_incumbent] == ["h1"]
    assert [p.component for p in prune_set(_records(), 3, 4)] == ["memory", "skill"]
    gone = prune_set(_records(), 9, 4)
    assert [p.recent_best_gain for p in gone] == [None, None, None]


def test_accepted_counts_and_edits() -> None:
    recs = _records()
    counts = accepted_counts(recs)
    assert list(counts) == list(KINDS)
    assert counts["prompt"] == 1 and sum(counts.values()) == 1
    assert accepted_counts(recs, before_t=0)["prompt"] == 0
    assert accepted_counts(recs, before_t=1)["prompt"] == 1
    legacy = EditRecord.from_json({"component": "skill", "accepted": True, "delta_S": 0.1})
    assert accepted_counts([legacy], before_t=0)["skill"] == 1
    acc = accepted_edits(recs)
    assert set(acc) == set(KINDS) and [a.edit_id for a in acc["prompt"]] == ["C1"] and acc["skill"] == []


def test_novelty() -> None:
    counts = accepted_counts(_records())
    assert novelty(["client_tool", "prompt"], counts) == 1
    assert novelty(["skill"], {"skill": 2}) == 0
    zeros = dict.fromkeys(KINDS, 0)
    assert novelty(["subagent"], zeros, enabled=K_ENABLED_PRODUCTION) == 0
    assert novelty(["subagent"], zeros) == 1
    assert novelty(["skill", "skill"], zeros) == 1
    assert novelty(["skill", "memory", "prompt"], {}) == 2


# --- docs/check-vectors.md §9.7 stall and exploration
# -----------------------------------------------------------------

TRAJ = [0.50, 0.53, 0.53, 0.535, 0.60]


def test_stall_flag() -> None:
    assert stall_flag(TRAJ, 3, 3, 0.02) == 0
    assert stall_flag(TRAJ, 3, 2, 0.02) == 1
    assert stall_flag(TRAJ, 4, 2, 0.02) == 0
    assert stall_flag(TRAJ, 1, 3, 0.02) == 0
    assert stall_flag(TRAJ, 5, 1, 0.02) == 0  # t beyond the trajectory
    assert stall_flag([0.5, 0.5], 1, 1, 0.0) == 1  # no movement is a stall even with delta 0
    with pytest.raises(ValueError):
        stall_flag(TRAJ, 3, -1, 0.02)
    with pytest.raises(ValueError):
        stall_flag(TRAJ, 3, 2, float("nan"))


def test_exploration_and_reserved() -> None:
    expl = exploration(1, {"prompt"}, 1, enabled=KINDS)
    assert expl.sigma == 1 and "prompt" not in expl.untried and expl.untried[0] == "control_flow"
    assert expl.reserved_active
    directive = exploration_directive(expl, w=3, delta=0.02)
    assert "RESERVED" in directive["text"] and "STALL" in directive["text"]
    assert directive["untried"] == list(expl.untried)
    assert (directive["sigma"], directive["m_draft"]) == (1, 1)
    assert reserved_variants(2, 1, 1, expl.untried) == {1}
    assert reserved_variants(2, 1, 0, expl.untried) == set()
    assert reserved_variants(3, 2, 1, ["skill"]) == {1, 2}
    assert reserved_variants(2, 1, 1, ()) == set()
    with pytest.raises(ValueError):
        reserved_variants(2, 3, 1, ["skill"])
    with pytest.raises(ValueError):
        reserved_variants(0, 0, 1, ["skill"])


def test_exploration_directive_cases() -> None:
    optional = exploration_directive(exploration(0, {"prompt"}, 1, enabled=KINDS))
    assert "optional" in optional["text"] and "RESERVED" not in optional["text"]
    done = exploration_directive(exploration(1, set(KINDS), 1, enabled=KINDS))
    assert "exercised" in done["text"] and done["untried"] == []
    generic = exploration_directive(exploration(1, set(), 2, enabled=KINDS))
    assert "2 slot(s) are RESERVED" in generic["text"]


def test_production_untried_is_empty_when_all_enabled_tried() -> None:
    prod = exploration(1, set(K_ENABLED_PRODUCTION), 1, enabled=K_ENABLED_PRODUCTION)
    assert prod.untried == () and not prod.reserved_active
    assert reserved_variants(2, 1, 1, prod.untried) == set()
    paper = exploration(1, set(K_ENABLED_PRODUCTION), 1, enabled=KINDS)
    assert paper.untried == ("subagent",) and reserved_variants(2, 1, 1, paper.untried) == {1}
