"""Shared fixtures of the role tests: the docs/formats.md demo scenario, built once per session."""

from __future__ import annotations

import pytest

from rsi_common.world import TurnWorld
from rsi_worker.consolidate.draft import DraftContext
from tests.unit.roles.helpers import demo_context, demo_worlds


@pytest.fixture(scope="session")
def worlds() -> list[TurnWorld]:
    """The demo worlds (two corrected conversations, one accepted)."""
    return demo_worlds()


@pytest.fixture(scope="session")
def ctx(worlds: list[TurnWorld]) -> DraftContext:
    """Round 0 over the demo worlds under H0, analysed by the sim analyst (b_t = 3, no stall)."""
    return demo_context(worlds=worlds)
