"""Reproducible runs: a run records its exact inputs when its round starts, and ``replay_inline``
re-runs it from them on a scratch copy with the same decision (sim model); altered inputs are
refused naming the world."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from rsi_common.config import Settings
from rsi_common.db import WorldRow, get_run_inputs
from rsi_common.errors import InvalidInput
from rsi_worker.cli import app
from rsi_worker.consolidate import default_models
from rsi_worker.jobs.replay_run import replay_inline
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.pipeline import Stack

REQUEST = "Compare laptops: use search query=laptops"


def test_an_adopted_run_replays_to_the_same_decision_from_its_recorded_inputs(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0)
    stack = Stack(settings)
    stack.say("shop", "c1", REQUEST)
    stack.say("shop", "c1", CORRECTION)
    result = stack.consolidate("shop")
    assert result.status == "adopted"
    with stack.sessions() as s:
        row = get_run_inputs(s, str(result.run_id))
        assert row is not None and len(row.digest) == 64
        inputs = dict(row.inputs)
    assert inputs["schema"] == "rsi-run-inputs/1" and inputs["worlds"] and inputs["state_digest"]
    stack.say("shop", "c2", "Compare phones: use search query=phones")  # later turns change nothing

    replay = replay_inline(settings, str(result.run_id), default_models(settings))
    assert replay["same"], replay
    assert replay["original"]["status"] == "adopted" and replay["original"]["winner"] in ("A", "B")
    assert replay["notes"] == []
    env = {"RSI_DATABASE_URL": settings.database_url, "RSI_HOME": str(tmp_path / "home"),
           "RSI_MODEL_BACKOFF_S": "0"}
    done = CliRunner().invoke(app, ["runs", "replay", str(result.run_id), "--inline", "--json"], env=env)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["same"] is True
    other = Settings(database_url=settings.database_url, model_backoff_s=0, consolidation={"k": 3})
    assert replay_inline(other, str(result.run_id), default_models(other))["notes"] == [
        "the consolidation settings differ from the recorded ones"]

    with stack.engine.begin() as conn:  # a recorded world altered after the run
        wid = sorted(inputs["worlds"])[0]
        world = dict(conn.execute(sa.select(WorldRow.world).where(WorldRow.id == wid)).scalar_one())
        world["clock"] = 1.0
        conn.execute(sa.update(WorldRow).where(WorldRow.id == wid).values(world=world))
    with pytest.raises(InvalidInput, match=f"world {wid} no longer has the recorded content"):
        replay_inline(settings, str(result.run_id), default_models(settings))
    with pytest.raises(InvalidInput, match="unknown run"):
        replay_inline(settings, "run_missing", default_models(settings))
    done = CliRunner().invoke(app, ["runs", "replay", str(result.run_id), "--inline"], env=env)
    assert done.exit_code == 1 and "no longer has the recorded content" in done.output
    stack.close()
