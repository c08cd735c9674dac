"""``rsi loadtest`` end to end: 20 s of turns at a fixed rate through 2 real worker processes
(embedded cluster: a private redis-server, SQLite), the report parsed from ``--json`` and the
no-lost-turn property checked again from the database itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from rsi_common.db import RunRow, WorldRow, make_engine
from tests.support.cluster import REPO

RATE, DURATION_S, AGENTS = 5, 20, 10
CLOSED = ("recorded", "kept", "adopted", "failed", "skipped", "interrupted")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_loadtest_loses_no_turn(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RSI_")}
    env.update(RSI_MODEL_BACKOFF_S="0", RSI_LOG_FORMAT="text")
    home = tmp_path / "home"
    cmd = [sys.executable, "-m", "rsi_worker.cli", "loadtest", "--embedded", "--workers", "2",
           "--rate", str(RATE), "--duration", str(DURATION_S), "--agents", str(AGENTS), "--seed", "7",
           "--agent-prefix", "lt", "--home", str(home), "--drain-timeout", "120", "--json"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)

    turns = report["turns"]
    assert turns["offered"] == turns["recorded"] == RATE * DURATION_S and turns["failed"] == 0
    assert turns["by_kind"].get("correction", 0) > 0  # some turns asked for a round
    assert report["drained"] and report["ok"]
    lost = report["lost"]
    assert lost["lost_turns"] == 0 and lost["agents_uncovered"] == [] and lost["worlds_missing"] == []
    assert lost["worlds_stored"] == lost["worlds_expected"] == RATE * DURATION_S
    assert report["runs"]["total"] >= AGENTS and "failed" not in report["runs"]["by_status"]
    assert report["runs"]["by_status"].get("adopted", 0) >= 1
    for key in ("queue_wait", "turn_to_judge", "record_turn"):
        assert report[key]["n"] > 0 and report[key]["p50_ms"] is not None
    assert report["throughput_turns_per_s"] > 0 and report["redeliveries"]["tasks"] >= 0

    # independently of the tool: every turn's world is in SQL, every agent's last turn was consolidated
    engine = make_engine(f"sqlite:///{home / 'rsi.db'}")
    try:
        with engine.connect() as conn:
            for i in range(AGENTS):
                agent = f"lt-{i}"
                worlds = conn.execute(sa.select(WorldRow.io_id, WorldRow.created_at)
                                      .where(WorldRow.agent_id == agent)
                                      .order_by(WorldRow.created_at.desc(), WorldRow.id)).all()
                assert len(worlds) == RATE * DURATION_S // AGENTS
                last_io, last_at = worlds[0]
                runs = conn.execute(sa.select(RunRow.io_id, RunRow.status, RunRow.started_at)
                                    .where(RunRow.agent_id == agent)).all()
                assert all(r.status in CLOSED for r in runs)
                assert any(r.io_id == last_io or r.started_at >= last_at for r in runs), agent
    finally:
        engine.dispose()
