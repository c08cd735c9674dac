"""Digesters over rendered traces and the three-lens report (docs/algorithm/evolve.md#analysis)."""

from __future__ import annotations

from typing import Any

import rsi_worker.roles  # noqa: F401 - registers the sim's role behaviours
from rsi_common.config import Settings
from rsi_common.llm import ModelRequest, ModelResponse, Usage, make_client
from rsi_common.world import TurnWorld
from rsi_worker.roles.analyst import View
from rsi_worker.roles.digester import DIGEST_KEYS, TOOLS, _tool, digest, report

CRITERION = "A better answer does this: show it as a table"


def _view(wid: str, answer: str, passed: bool) -> View:
    row = {
        "source": "replay",
        "status": "ok",
        "reward": 1.0 if passed else 0.0,
        "weight": 1,
        "trial": 0,
        "result": {
            "replay": {"answer": answer, "status": "completed"},
            "verdicts": [{"name": "t", "criterion": CRITERION, "pass": passed, "reason": "r"}],
        },
    }
    world = TurnWorld(id=wid, data={"input": "Compare: Aero 14 1299 EUR, Zen 13 999 EUR"})
    return View(
        world=world, row=row, checks=[{"name": "t", "criterion": CRITERION}], mean=1.0 if passed else 0.0
    )


def test_sim_digests_read_the_trace_through_tools_and_report_three_lenses() -> None:
    settings = Settings()
    fail = digest(
        make_client("sim", "sim-1", settings, role="digester"),
        _view("w1", "Aero 14: 1299 EUR", False),
        "fail",
    )
    assert fail["world"] == "w1" and fail["blocker"] == "missing-table" and set(DIGEST_KEYS) <= set(fail)
    ok = digest(
        make_client("sim", "sim-1", settings, role="digester"),
        _view("w2", "| name | price |\n|---|---|\n| Aero 14 | 1299 EUR |", True),
        "success",
    )
    assert ok["blocker"] == "" and "has-table" in ok["narrative"]
    out = report(make_client("sim", "sim-1", settings, role="reporter"), [fail, ok])
    assert [m["mode"] for m in out["failure_modes"]] == ["missing-table"]
    assert out["failure_modes"][0]["worlds"] == ["w1"]
    assert "has-table" in [h["habit"] for h in out["success_habits"]] and out["capability_gaps"] == []


def test_read_only_tools_over_the_trace_files() -> None:
    files = {"trace.md": "WORLD w\\nREQUEST\\nhello\\n[FAIL] (t) x", "checks.json": "[]"}
    files = {k: v.replace("\\n", "\n") for k, v in files.items()}
    assert _tool(files, "glob", {"pattern": "*.md"}) == "trace.md"
    assert _tool(files, "grep", {"pattern": r"^\[FAIL\]"}) == "trace.md:4: [FAIL] (t) x"
    assert "no file" in _tool(files, "read_file", {"path": "../etc/passwd"})
    assert "bad pattern" in _tool(files, "grep", {"pattern": "("})
    assert "unknown tool" in _tool(files, "write_file", {"path": "x"})
    assert {t["name"] for t in TOOLS} == {"read_file", "glob", "grep", "return"}


class Looping:
    """A model that keeps calling glob and never returns."""

    provider, model = "sim", "loop"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        block: dict[str, Any] = {"type": "tool_use", "id": f"t{self.calls}", "name": "glob", "input": {}}
        return ModelResponse([block], Usage(1, 1), "tool_use", "loop")


def test_a_digest_that_never_returns_stops_at_the_step_limit() -> None:
    client = Looping()
    out = digest(client, _view("w1", "x", False), "fail")
    assert client.calls == 6 and out["blocker"].startswith("digest unavailable")
