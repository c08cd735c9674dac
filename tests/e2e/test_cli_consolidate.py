"""``rsi consolidate --inline`` in a subprocess prints the run record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rsi_common.config import Settings
from rsi_worker.jobs.scenario import CORRECTION
from tests.support.pipeline import Stack


def test_inline_consolidation_from_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rsi.db'}"
    stack = Stack(Settings(database_url=url))
    stack.say("shop", "c1", "Compare laptops: use search query=laptops")
    stack.say("shop", "c1", CORRECTION)
    stack.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSI_")}
    env.update(RSI_DATABASE_URL=url, RSI_HOME=str(tmp_path / ".rsi"), RSI_MODEL_BACKOFF_S="0")
    done = subprocess.run([sys.executable, "-m", "rsi_worker.cli", "consolidate", "--agent", "shop",
                           "--inline", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout)
    assert records[0]["status"] == "adopted" and records[0]["round"]["winner"] in ("A", "B")
    again = subprocess.run([sys.executable, "-m", "rsi_worker.cli", "consolidate", "--agent", "nobody",
                            "--inline"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "no recorded turns" in again.stderr
