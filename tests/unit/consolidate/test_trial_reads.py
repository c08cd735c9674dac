"""A trial's cheaper reads and writes (docs/performance/consolidation.md#a-trials-cost): the slot's
row stored with one statement and read back only for a duplicate, the lease renewal, cancel flag and
spend in one Redis round trip, and the per-process memos."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.coord import Coordinator, Lease, cancel_key
from rsi_common.db import ensure_agent, make_engine, session_factory, start_run, upgrade
from rsi_common.db.replays import get_replay_row, store_trial, stored_trial
from rsi_common.errors import InvalidInput
from rsi_worker.consolidate.trial_memo import Memo
from rsi_worker.consolidate.trials import row_json


@pytest.fixture(scope="module")
def _template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trials") / "template.db"
    eng = make_engine(f"sqlite:///{path}")
    upgrade(eng)
    eng.dispose()
    return path


@pytest.fixture
def factory(_template: Path, tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    target = tmp_path / "rsi.db"
    target.write_bytes(_template.read_bytes())
    eng: Engine = make_engine(f"sqlite:///{target}")
    yield session_factory(eng)
    eng.dispose()


def _run(factory: sessionmaker[Session]) -> str:
    with factory() as s:
        ensure_agent(s, "a1")
        run_id = start_run(s, "a1", fence=1, io_id="io1").id
        s.commit()
    return run_id


def test_store_trial_inserts_once_and_returns_the_first_row(factory: sessionmaker[Session]) -> None:
    run_id = _run(factory)
    result = {"passed": 2, "verdicts": [{"name": "c", "pass": True}]}
    with factory() as s:
        first, created = store_trial(s, run_id, "A", "w1", 0, status="ok", reward=1.0, weight=2.0,
                                     tokens=7, result=result)
        s.commit()
    assert created
    assert first == {"candidate": "A", "world_id": "w1", "trial": 0, "source": "replay", "status": "ok",
                     "reward": 1.0, "weight": 2.0, "tokens": 7, "result": result}
    with factory() as s:  # a duplicate delivery with another outcome stores nothing
        again, created = store_trial(s, run_id, "A", "w1", 0, status="missing", result={"error": "x"})
        s.commit()
        orm = get_replay_row(s, run_id, "A", "w1", 0)
        assert orm is not None
        as_orm = row_json(orm)
    assert not created
    assert again == first == as_orm  # the same dict the ORM path returned


def test_stored_trial_reads_a_slot_or_none(factory: sessionmaker[Session]) -> None:
    run_id = _run(factory)
    with factory() as s:
        assert stored_trial(s, run_id, "incumbent", "w1", 1) is None
        store_trial(s, run_id, "incumbent", "w1", 1, status="cancelled", source="replay")
        s.commit()
        row = stored_trial(s, run_id, "incumbent", "w1", 1)
    assert row is not None and row["status"] == "cancelled" and row["result"] == {}


@pytest.mark.parametrize("bad", [{"status": "done"}, {"status": "ok", "source": "guessed"},
                                 {"status": "ok", "trial": -1}])
def test_store_trial_refuses_bad_fields_and_stores_nothing(factory: sessionmaker[Session],
                                                           bad: dict[str, Any]) -> None:
    run_id = _run(factory)
    trial = bad.pop("trial", 0)
    with factory() as s:
        with pytest.raises(InvalidInput):
            store_trial(s, run_id, "A", "w1", trial, **bad)
        assert stored_trial(s, run_id, "A", "w1", trial) is None


def test_renew_for_trial_answers_as_the_three_calls() -> None:
    coord = Coordinator(fakeredis.FakeRedis(), lease_s=30)
    lease = coord.try_begin("a1", "io1")
    assert lease is not None
    coord.spend_add("a1", 40, "2026-12-01")
    assert coord.renew_for_trial(lease, "r1", "B", "2026-12-01") == (True, False, (40, 40))
    coord.client.set(cancel_key("r1", "B"), 1)
    assert coord.renew_for_trial(lease, "r1", "B", None) == (True, True, None)
    assert coord.renew_for_trial(lease, "r1", None, None) == (True, False, None)  # not asked
    stranger = Lease("a1", "not-the-token", lease.fence, "io1")
    assert coord.renew_for_trial(stranger, "r1", "B", "2026-12-01")[0] is False
    assert coord.renew(stranger) is False  # the same answer as renew


def test_memo_remembers_values_not_misses_and_empties_when_full() -> None:
    memo = Memo(limit=2)
    loads: list[str] = []

    def load(value: str | None) -> Any:
        return lambda: loads.append(str(value)) or value

    assert memo.get("x", load(None)) is None
    assert memo.get("x", load("1")) == "1"  # a miss is not remembered
    assert memo.get("x", load("2")) == "1"  # a value is
    memo.get("y", load("y"))
    memo.get("z", load("z"))  # full: emptied, then z stored
    assert len(memo) == 1
    assert loads == ["None", "1", "y", "z"]
