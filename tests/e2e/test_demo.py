"""``rsi demo`` end to end in a subprocess: the adoption and the next turn's table answer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster import REPO


@pytest.mark.timeout(400)  # two demo runs of ~20 s each when idle: a hang guard, not a budget
def test_demo_shows_the_adoption_and_the_learned_answer(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RSI_")}
    env["COLUMNS"] = "120"
    cmd = [sys.executable, "-m", "rsi_worker.cli", "demo", "--fresh", "--home", str(tmp_path / "demo")]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"adopted — variant [AB] adopted \(\+1\.0000\)", out)
    assert "+          \"When you compare options, present them as a markdown table.\"" in out \
        or "markdown table" in out
    learned = out.split("5. The next live turn uses the adopted harness", 1)[1]
    assert "|---|---|" in learned and "| Pixelo 9 | 799 |" in learned
    assert learned.count("Recommendation:") == 1
    # repeatable: a second --fresh run adopts again
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0 and "adopted — variant" in again.stdout
