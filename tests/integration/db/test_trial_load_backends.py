"""A trial's table statements on both backends (rsi_worker/consolidate/trial_load.py,
rsi_common/db/replays.py): the run row's JSON columns read as their stored text decode to what the
ORM reads, and a slot is stored once and read back as stored."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db import ensure_agent, start_run
from rsi_common.db.models import RunRow
from rsi_common.db.replays import store_trial, stored_trial
from rsi_worker.consolidate import trial_memo
from rsi_worker.consolidate.context import RoundContext
from rsi_worker.consolidate.trial_load import run_view


def test_the_run_view_and_the_slot_on_both_backends(factory: sessionmaker[Session]) -> None:
    trial_memo.clear()
    with factory.begin() as s:
        ensure_agent(s, "a1")
        run_id = start_run(s, "a1", fence=1, io_id="io1").id
        ctx = RoundContext(run_id, "a1", 1, "tok", "io1", checks={"w1": [{"name": "é", "criterion": "ü"}]})
        s.execute(sa.update(RunRow).where(RunRow.id == run_id).values(
            params=ctx.to_json(), drafts={"A": {"payload": {"version": "v", "x": [1.5, None]}}}))
    with factory() as s:
        viewed, status, drafts = run_view(s, run_id)
        row = s.get(RunRow, run_id)
        assert row is not None
        assert viewed.to_json() == RoundContext.from_json(row.params).to_json() and status == "running"
        assert dict(drafts) == row.drafts
        assert stored_trial(s, run_id, "A", "w1", 0) is None
        s.commit()
    result = {"passed": 1, "verdicts": [{"name": "é", "pass": True}]}
    with factory() as s:
        first, created = store_trial(s, run_id, "A", "w1", 0, status="ok", reward=1.0, weight=1.0,
                                     tokens=3, result=result)
        s.commit()
    with factory() as s:
        again, created_again = store_trial(s, run_id, "A", "w1", 0, status="missing", result={"error": "x"})
        found = stored_trial(s, run_id, "A", "w1", 0)
        s.commit()
    assert created and not created_again
    assert first == again == found and found is not None and found["result"] == result
    trial_memo.clear()
