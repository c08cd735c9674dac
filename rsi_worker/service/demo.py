"""``rsi demo --serve``: leave the console up on the demo's data, print its URL and tokens, and serve
until interrupted (Ctrl-C)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from rsi_common import db
from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_worker.service.app import create_app
from rsi_worker.service.server import LiveServer
from rsi_worker.service.state import build_state

__all__ = ["serve_demo"]


def serve_demo(
    settings: Settings,
    client: RsiClient,
    *,
    host: str,
    port: int,
    agent: str,
    say: Callable[[str], None],
    stop: threading.Event | None = None,
) -> None:
    """Serve the demo cluster's console until ``stop`` is set or Ctrl-C.

    Args:
        settings: the embedded cluster's settings.
        client: a host client of the cluster (its Redis and dispatcher are shared).
        host, port: where to listen (port 0: any free port).
        agent: the demo agent (its page is printed).
        say: prints one line.
        stop: set it to end serving (tests); default: wait for Ctrl-C.
    """
    svc = build_state(settings, redis_client=client.redis, dispatcher=client.dispatcher)
    with svc.sessions.begin() as s:
        viewer = db.create_token(s, "demo viewer", ["viewer"], created_by="rsi demo").token
        operator = db.create_token(s, "demo operator", ["operator"], created_by="rsi demo").token
    server = LiveServer(create_app(svc), host, port).start()
    try:
        say(f"console: {server.url}/console/agents/{agent}")
        say(f"viewer token: {viewer}")
        say(f"operator token (rollback, pin, freeze): {operator}")
        say("serving until Ctrl-C")
        (stop or threading.Event()).wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
