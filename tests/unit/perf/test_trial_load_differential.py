"""A trial's one read (rsi_worker/consolidate/trial_load.py, docs/performance/consolidation.md#a-trials-cost)
stores exactly what the previous reads stored: the same agent's run on two identical stacks, one with
the memos and the merged read, one with every memo bypassed and the run row read with the ORM in a
transaction of its own (the previous ``flow._load`` + ``trials._reads``), store byte-identical trial
rows. And the decoded context is keyed by the column's text: a rewritten context is never a stale hit."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from rsi_common.config import Settings
from rsi_common.db import ensure_agent, start_run
from rsi_common.db.models import ReplayRow, RunRow, WorldRow
from rsi_worker.bench.consolidate import seed_agent
from rsi_worker.consolidate import flow, trial_load, trial_memo
from rsi_worker.consolidate.context import RoundContext
from tests.support.pipeline import Stack


def _stack(path: Path) -> Stack:
    base = Settings(database_url=f"sqlite:///{path / 'rsi.db'}", model_backoff_s=0)
    return Stack(base.model_copy(update={"sim": base.sim.model_copy(update={"latency_ms": 0.0})}))


@pytest.fixture
def stacks(tmp_path: Path) -> Iterator[tuple[Stack, Stack]]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = _stack(tmp_path / "a"), _stack(tmp_path / "b")
    trial_memo.clear()
    yield a, b
    trial_memo.clear()
    a.close()
    b.close()


_SECONDS = re.compile(r'"seconds": [0-9.e+-]+')


def _rows(stack: Stack, run_id: str) -> list[tuple[Any, ...]]:
    """The run's trial rows as stored (the result as its text), each world's random id and io id
    replaced by its conversation and turn and the replay's wall time by 0 (the two stacks' ids and
    clocks differ, nothing else may)."""
    with stack.sessions() as s:
        names = {}
        for wid, io, conv, seq in s.execute(sa.select(WorldRow.id, WorldRow.io_id, WorldRow.interaction_id,
                                                      WorldRow.seq)):
            names[wid], names[io] = f"world {conv}#{seq}", f"io {conv}#{seq}"
        rows = s.execute(
            sa.select(ReplayRow.candidate, ReplayRow.world_id, ReplayRow.trial, ReplayRow.source,
                      ReplayRow.status, ReplayRow.reward, ReplayRow.weight, ReplayRow.tokens,
                      sa.cast(ReplayRow.result, sa.Text))
            .where(ReplayRow.run_id == run_id)).all()
    out = []
    for row in rows:
        text = _SECONDS.sub('"seconds": 0', str(row[-1]))  # the replay's wall time
        for raw, name in names.items():
            text = text.replace(raw, name)
        out.append((row[0], names[row[1]], *row[2:-1], text))
    return sorted(out)


def _previous_load(deps: Any, run_id: str, slot: Any) -> trial_load.TrialLoad:
    """The reads before trial_load: the ORM load of the run row, the trial's reads left to the body."""
    ctx, status, drafts = flow._load(deps, run_id)
    return trial_load.TrialLoad(ctx, status, drafts, None)


def _run(stack: Stack) -> tuple[str, Any]:
    io = seed_agent(stack.sessions, stack.settings, "agent", accepted=2, corrected=2)
    result = stack.consolidate("agent", None) if io else None
    assert result is not None and result.run_id
    return str(result.run_id), result


def test_a_trials_stored_rows_are_byte_identical_with_and_without_the_memo(
        stacks: tuple[Stack, Stack], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = stacks
    run_a, result_a = _run(a)
    hits = len(trial_memo.contexts)
    trial_memo.clear()
    with monkeypatch.context() as m:
        m.setattr(trial_memo.Memo, "get", lambda self, key, load: load())
        m.setattr(flow, "load_trial", _previous_load)
        run_b, result_b = _run(b)
    rows_a, rows_b = _rows(a, run_a), _rows(b, run_b)
    assert hits >= 2  # the memoized side decoded a few contexts, not one per trial
    assert len(rows_a) >= 16 and result_a.status == "adopted", (len(rows_a), result_a.status)
    assert rows_a == rows_b
    assert (result_a.status, result_a.round.get("winner")) == (result_b.status, result_b.round.get("winner"))


def test_a_rewritten_context_is_decoded_again(stacks: tuple[Stack, Stack]) -> None:
    a, _ = stacks
    with a.sessions() as s:
        ensure_agent(s, "agent")
        run_id = start_run(s, "agent", fence=1, io_id="io1").id
        s.execute(sa.update(RunRow).where(RunRow.id == run_id).values(
            params=RoundContext(run_id, "agent", 1, "tok", "io1").to_json()))
        s.commit()
    with a.sessions() as s:
        first, status, drafts = trial_load.run_view(s, run_id)
        again, _, _ = trial_load.run_view(s, run_id)
        assert again is first and first.t == 0  # the same text: the memo's object
        s.execute(sa.update(RunRow).where(RunRow.id == run_id).values(params=first.to_json() | {"t": 1}))
        s.commit()
    with a.sessions() as s:
        changed, _, _ = trial_load.run_view(s, run_id)
    assert isinstance(changed, RoundContext) and changed is not first
    assert (changed.t, status, dict(drafts)) == (1, "running", {})
