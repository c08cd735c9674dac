"""``rsi demo --serve``: the console stays up on the demo's data and prints its URL and tokens."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import REPO


@pytest.mark.timeout(300)
def test_demo_serve_leaves_the_console_up_with_a_viewer_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RSI_")}
    env["COLUMNS"] = "200"
    cmd = [sys.executable, "-m", "rsi_worker.cli", "demo", "--fresh", "--home", str(tmp_path / "demo"),
           "--latency-ms", "0", "--serve", "--port", "0"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in out], daemon=True).start()
    seen: dict[str, str] = {}
    try:
        while "viewer" not in seen or "console" not in seen:
            line = lines.get(timeout=240)  # the demo runs before the console is up
            if m := re.match(r"console: (http://\S+)", line):
                seen["console"] = m[1]
            if m := re.match(r"viewer token: (\S+)", line):
                seen["viewer"] = m[1]
        base = seen["console"].split("/console/")[0]
        auth = {"Authorization": f"Bearer {seen['viewer']}"}
        agent = httpx.get(f"{base}/v1/agents/demo-shop", headers=auth, timeout=10).json()
        assert agent["adoptions"] == 1 and agent["current_version"]
        assert httpx.post(f"{base}/v1/agents/demo-shop/freeze", headers=auth, timeout=10).status_code == 403
        page = httpx.get(seen["console"], cookies={"rsi_console": seen["viewer"]}, timeout=10)
        assert page.status_code == 200 and 'class="pt pt-incumbent"' in page.text
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)
    assert proc.returncode == 0
