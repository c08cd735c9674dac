"""Fixtures shared by the record- and no-signal-path tests: an in-process stack on a private SQLite
file (fakeredis, the sim model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi_common.config import Settings
from tests.support.pipeline import Stack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0))
    yield s
    s.close()
