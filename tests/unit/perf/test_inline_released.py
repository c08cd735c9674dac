"""The inline driver runs every follow-on trial inside ``waves.released`` (rsi_worker/consolidate/inline.py):
it decided the trial's wave itself, so no trial reads its candidate's bound in ``await_first_wave``
(docs/performance/consolidation.md#trial-order); a draft is not run inside it."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from rsi_worker.consolidate import flow, inline
from rsi_worker.consolidate.evaluate import plan_candidate
from rsi_worker.consolidate.inline import SerialExecutor, ThreadExecutor
from rsi_worker.consolidate.waves import is_released

CHECKS = {"w1": [1, 2, 3], "w2": [1, 2], "w3": [1], "w4": [1]}


@pytest.mark.parametrize("executor", [SerialExecutor(), ThreadExecutor(1), ThreadExecutor(4)])
def test_follow_on_trials_run_released_and_drafts_do_not(monkeypatch: pytest.MonkeyPatch,
                                                         executor: Any) -> None:
    slots = {v: plan_candidate(v, list(CHECKS), 2, checks=CHECKS) for v in ("A", "B")}
    seen: list[tuple[str, Any, bool]] = []
    lock = threading.Lock()

    def run_member(deps: Any, members: str, run_id: str, item: Any) -> dict[str, Any]:
        with lock:
            seen.append((members, item, is_released()))
        if members == "drafts":
            return {"status": "ok", "variant": item, "wave": 3, "slots": [s.to_json() for s in slots[item]]}
        return {"status": "ok", "result": {"passed": 0}}

    monkeypatch.setattr(flow, "run_member", run_member)
    edge = SimpleNamespace(members="drafts")
    inline._fan_out(SimpleNamespace(), edge, SimpleNamespace(run_id="r"), ["A", "B"], executor)  # type: ignore[arg-type]
    drafts = [r for r in seen if r[0] == "drafts"]
    trials = [r for r in seen if r[0] == "trials"]
    assert sorted(d[1] for d in drafts) == ["A", "B"] and not any(d[2] for d in drafts)
    assert len(trials) == sum(len(s) for s in slots.values())  # every slot ran once
    assert all(t[2] for t in trials)
    assert not is_released()  # the flag does not leak out of the member
