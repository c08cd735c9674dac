"""The consolidation analyst's and the evolve reporter's reports keep only what is storable and
bounded of a hostile reply (rsi_worker/roles/report_items.py): never a crash of the round, never a
NaN or lone surrogate that PostgreSQL would refuse in the run record, never an unbounded row."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsi_common.stored import first_problem
from rsi_worker.roles.analyst import analyze
from rsi_worker.roles.digester import report
from rsi_worker.roles.report_items import NOTES_CHARS, REPORT_ITEM_CHARS, REPORT_ITEMS
from tests.adversarial.model_replies import REPORTS, Scripted

LISTS = ("failure_modes", "capability_gaps", "success_habits")


def _bounded_and_storable(out: dict[str, Any]) -> None:
    assert first_problem(out) is None  # finite numbers, no lone surrogate, depth within the limit
    json.dumps(out, allow_nan=False)
    for key in LISTS:
        items = out.get(key, [])
        assert isinstance(items, list) and len(items) <= REPORT_ITEMS
        assert all(isinstance(i, dict) and len(json.dumps(i, ensure_ascii=False)) <= REPORT_ITEM_CHARS
                   for i in items)
    assert isinstance(out["notes"], str) and len(out["notes"]) <= NOTES_CHARS


@pytest.mark.parametrize("reply", list(REPORTS.values()), ids=list(REPORTS))
def test_the_analyst_keeps_only_a_bounded_storable_report(reply: str) -> None:
    out = analyze(Scripted(reply), [], {})  # was: TypeError on a number for a list, NaN and 5 MB kept
    _bounded_and_storable(out)


@pytest.mark.parametrize("reply", list(REPORTS.values()), ids=list(REPORTS))
def test_the_reporter_keeps_only_a_bounded_storable_report(reply: str) -> None:
    _bounded_and_storable(report(Scripted(reply), []))


def test_a_well_formed_report_is_kept_whole() -> None:
    reply = {"failure_modes": [{"mode": "m1", "description": "d", "worlds": ["w1"], "lens": "format"}],
             "success_habits": [{"habit": "h1", "description": "d", "worlds": ["w2"]}],
             "notes": "two worlds"}
    out = analyze(Scripted(json.dumps(reply)), [], {})
    assert out == reply
    many = {"failure_modes": [{"mode": f"m{i}"} for i in range(REPORT_ITEMS + 5)],
            "success_habits": [{"habit": "x" * (REPORT_ITEM_CHARS + 1)}, {"habit": "kept"}]}
    out = analyze(Scripted(json.dumps(many)), [], {})
    assert [m["mode"] for m in out["failure_modes"]] == [f"m{i}" for i in range(REPORT_ITEMS)]
    assert out["success_habits"] == [{"habit": "kept"}] and out["notes"] == ""
