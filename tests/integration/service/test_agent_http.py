"""The same ``Agent`` over HTTP (one flag: ``service_url`` and a ``host`` token): turns and signals
reach the live service's database; the history stays on the host, in ``<RSI_HOME>/history.db``."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsi_common import Agent, db
from rsi_common.agent import FinalResult, TextDelta
from rsi_common.config import Settings
from rsi_common.errors import InvalidInput
from tests.integration.service.conftest import Live

pytestmark = pytest.mark.timeout(120)


def test_an_agent_records_over_http(live: Live, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "host")
    with Agent("remote-1", settings=settings, service_url=live.url, token=live.tokens["host"]) as agent:
        first = agent.run("Compare two laptops under 1500 EUR")
        assert first.status == "completed" and first.recorded, first.record_error
        assert agent.host().mode == "http"
        events = list(agent.stream("And which one is lighter?"))
        final = events[-1]
        assert isinstance(final, FinalResult) and final.result.recorded
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == final.result.answer
        signals = agent.feedback(stars=2, comment="no weights given")
        assert signals.io_id == final.result.io_id
        assert len(agent.history()) == 4, "two turns of history, kept on the host"
    with db.session_factory(live.engine).begin() as s:
        row = db.world_by_io(s, "remote-1", final.result.io_id)
        assert row is not None and row.signals == {"stars": 2, "comment": "no weights given"}
        assert db.world_by_io(s, "remote-1", first.io_id) is not None
    assert (tmp_path / "host" / "history.db").is_file()


def test_the_flag_needs_both_parts(tmp_path: Path) -> None:
    agent = Agent("remote-2", settings=Settings(home=tmp_path), service_url="http://127.0.0.1:9")
    with pytest.raises(InvalidInput, match="service_url and token: give both"):
        agent.run("hello")
