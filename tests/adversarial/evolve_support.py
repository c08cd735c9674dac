"""Fixtures of the offline-evolve hostile-input tests (imported by the test modules that use them: the
adversarial directory has no conftest)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi_worker.evolve.engine import run_inline
from tests.unit.evolve.conftest import EvolveStack

__all__ = ["done", "stack"]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[EvolveStack]:
    s = EvolveStack(tmp_path)
    yield s
    s.engine.dispose()


@pytest.fixture
def done(stack: EvolveStack) -> str:
    """A finished one-round run whose frontier can be promoted (the sim adopts in round 0)."""
    name = stack.create("r", params={"T": 1})
    run_inline(stack.env, name)
    state = stack.store.run(name)[4]
    assert state is not None and state["incumbent"]
    return name
