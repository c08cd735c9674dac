"""Fixtures shared by the record- and no-signal-path tests: an in-process stack on a private SQLite
file (fakeredis, the sim model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi_common.config import Settings
from rsi_worker.consolidate import flow, pool_memo
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.pipeline import Stack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0))
    yield s
    s.close()


@pytest.fixture
def small_pool_stack(tmp_path: Path) -> Iterator[Stack]:
    """A stack whose world pool holds 5 worlds (older worlds leave the window soon), with the
    process's pool memo empty before and after."""
    base = Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0)
    small = base.consolidation.model_copy(update={"world_pool": 5})
    s = Stack(base.model_copy(update={"consolidation": small}))
    pool_memo.clear()
    yield s
    pool_memo.clear()
    s.close()


def incumbent_trials_stored(stack: Stack) -> str:
    """Drive ``stack`` through a correction and the run's incumbent trials; returns the run's id (its
    next step is ``after_incumbent``)."""
    stack.say("shop", "c1", "Compare laptops: use search query=laptops")
    io = str(stack.say("shop", "c1", CORRECTION).world["io_id"])
    nxt = flow.open_run(stack.deps, stack.lease("shop", io))
    assert nxt.kind == "trials" and nxt.slots
    for slot in nxt.slots:
        flow.run_trial(stack.deps, nxt.ctx.run_id, slot)
    return nxt.ctx.run_id
