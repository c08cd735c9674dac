"""Stored run contexts and states through the real pipeline (docs/formats.md#run-context-and-round):
rows in the version 1 form still carry a run to its end, and a hostile row fails the run with an
error naming the field, never a partial write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsi_common.config import Settings
from rsi_common.db import get_agent, get_run
from rsi_worker.consolidate.context import RoundContext
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.pipeline import Stack

REQUEST = "Compare laptops: use search query=laptops"
_WRITE = RoundContext.to_json


def _as_version_1(ctx: RoundContext) -> dict[str, Any]:
    """The context as the first pipeline code stored it: no ``schema``, none of the late fields."""
    data = _WRITE(ctx)
    for key in ("schema", "lessons", "skipped_worlds", "force"):
        del data[key]
    if "incumbent" in data["round"]:
        data["round"]["incumbent"] = {k: v for k, v in data["round"]["incumbent"].items() if k != "sources"}
    return data


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0))
    yield s
    s.close()


def test_a_run_stored_in_version_1_form_still_completes(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write of the run context in the unversioned form (a run begun before an upgrade):
    every step migrates what it reads, and the run adopts as a current one does."""
    stack = Stack(Settings(database_url=db_url, model_backoff_s=0))
    try:
        monkeypatch.setattr(RoundContext, "to_json", _as_version_1)
        stack.say("shop", "c1", REQUEST)
        result = stack.consolidate("shop", stack.say("shop", "c1", CORRECTION))
        assert result.status == "adopted", result.reason
        assert result.round["incumbent"]["sources"] == {}  # read back from the row: the migrator's default
        with stack.sessions() as s:
            params = dict(get_run(s, result.run_id or "").params or {})
        assert "schema" not in params and "lessons" not in params  # really stored as version 1
        monkeypatch.undo()
        ctx = RoundContext.from_json(params)
        assert ctx.phase == "candidates" and ctx.round.set_up().delta == 0.5 and ctx.lessons == []
        assert stack.state("shop").progress == [0.0, 1.0]
    finally:
        stack.close()


def test_a_hostile_run_context_fails_the_run_naming_the_key(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    def smuggle(ctx: RoundContext) -> dict[str, Any]:
        data = _WRITE(ctx)
        if ctx.phase == "drafting":
            data["round"]["smuggled"] = "sk-ant-api03-" + "A" * 40
        return data

    monkeypatch.setattr(RoundContext, "to_json", smuggle)
    stack.say("shop", "c1", REQUEST)
    result = stack.consolidate("shop", stack.say("shop", "c1", CORRECTION))
    assert result.status == "failed"
    assert result.error is not None and result.error["type"] == "StoredDataError"
    assert result.error["message"].startswith("params.round: unknown key 'smuggled'")
    assert "sk-ant" not in str(result.summary())
    with stack.sessions() as s:
        assert get_agent(s, "shop").state == {}  # a failed run leaves the state unchanged
        assert get_agent(s, "shop").current_version is None
    assert stack.coord.lease_holder("shop") is None  # the lease was released


def test_a_hostile_state_fails_the_run_naming_the_field(stack: Stack) -> None:
    from rsi_common.db.models import AgentRow

    stack.say("shop", "c1", REQUEST)
    turn = stack.say("shop", "c1", CORRECTION)
    with stack.sessions() as s:
        row = s.get(AgentRow, "shop")
        assert row is not None
        row.state = {"schema": "rsi-consolidation-state/1", "progress": [0.0, "1"]}
        s.commit()
    result = stack.consolidate("shop", turn)
    assert result.status == "failed" and result.error is not None
    assert result.error["message"] == "state.progress[1]: must be a number, got str"
    with stack.sessions() as s:
        assert get_agent(s, "shop").state == {"schema": "rsi-consolidation-state/1", "progress": [0.0, "1"]}
