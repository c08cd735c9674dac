"""``rsi worker``'s supervisor (rsi_worker/local/supervise.py) on real child processes.

Test clusters start their workers ``--no-supervise`` (docs/dev/testing.md), so the supervisor's
restart and stop paths are tested here directly.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from rsi_worker.local.supervise import supervise


def test_a_child_that_exits_by_itself_is_started_again(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    child = [sys.executable, "-c",
             f"open({str(starts)!r}, 'a').write('start\\n'); raise SystemExit(3)"]
    assert supervise(child, max_restarts=1) == 3
    assert starts.read_text().splitlines() == ["start", "start"]  # the first run and one restart


def test_sigterm_is_passed_to_the_child_and_ends_the_supervisor(tmp_path: Path) -> None:
    up, stopped = tmp_path / "up", tmp_path / "stopped"
    child = [sys.executable, "-c",
             "import signal, sys, time\n"
             f"def stop(*_):\n    open({str(stopped)!r}, 'w').write('term')\n    sys.exit(0)\n"
             "signal.signal(signal.SIGTERM, stop)\n"
             f"open({str(up)!r}, 'w').write('up')\n"
             "time.sleep(120)\n"]

    def terminate_when_up() -> None:
        deadline = time.monotonic() + 60
        while not up.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)  # to the supervisor, as `kill <pid>` would

    thread = threading.Thread(target=terminate_when_up, daemon=True)
    thread.start()
    assert supervise(child) == 0  # the child's exit code after its warm stop, no restart
    thread.join(10)
    assert stopped.read_text() == "term"
    assert signal.getsignal(signal.SIGTERM) is not None  # the previous handler is back
