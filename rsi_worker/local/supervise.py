"""Keep a worker process running: restart it when it dies on its own.

A Celery worker that loses its Redis broker in the middle of a delivery can stop with an
"Unrecoverable error" from kombu's reconnect path instead of reconnecting. ``rsi worker`` therefore
runs the actual worker as a child process and starts it again (after 1 s, 2 s, 4 s … up to 30 s,
reset after a minute of healthy running) until it is asked to stop. SIGTERM and SIGINT are passed
to the child (Celery's warm shutdown); the supervisor then exits with the child's code. Platforms
that supervise processes themselves (Kubernetes, compose restart policies) can pass
``--no-supervise``.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Sequence
from types import FrameType

__all__ = ["supervise"]

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 30.0
HEALTHY_S = 60.0


def supervise(argv: Sequence[str], *, max_restarts: int | None = None) -> int:
    """Run ``argv`` until it exits after a stop request; restart it when it exits by itself.

    Args:
        argv: the child command.
        max_restarts: give up after this many restarts (``None`` = never).

    Returns:
        The child's exit code after a stop request (or after the last allowed restart).
    """
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    restarts, backoff_s = 0, 1.0
    try:
        while True:
            started = time.monotonic()
            child = subprocess.Popen(list(argv))
            code = child.wait()
            if stopping or (max_restarts is not None and restarts >= max_restarts):
                return code
            if time.monotonic() - started > HEALTHY_S:
                backoff_s = 1.0
            log.warning("worker exited with %s; restarting in %.0f s", code, backoff_s)
            time.sleep(backoff_s)
            restarts, backoff_s = restarts + 1, min(MAX_BACKOFF_S, backoff_s * 2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
