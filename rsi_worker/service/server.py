"""Running the service with uvicorn: :func:`serve` (``rsi serve``, blocking) and :class:`LiveServer`
(a server on a thread of this process, for ``rsi demo --serve``, ``rsi bench api`` and the tests).

Shutdown: uvicorn stops accepting, the event streams end (the hub is stopped when the app shuts
down, or after :data:`GRACEFUL_S` seconds at the latest) and requests in flight finish.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from rsi_common.config import Settings

__all__ = ["GRACEFUL_S", "LiveServer", "serve"]

GRACEFUL_S = 3
"""Seconds uvicorn waits for open connections (event streams) at shutdown before closing them."""


def _config(app: Any, host: str, port: int, **kw: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=kw.pop("log_level", "warning"),
        timeout_graceful_shutdown=GRACEFUL_S,
        proxy_headers=True,
        lifespan="on",
        **kw,
    )


def serve(settings: Settings, *, host: str, port: int, workers: int = 1, log_level: str = "info") -> None:
    """Serve the API and the console until interrupted (blocking).

    With ``workers > 1`` uvicorn forks processes that each build their own state from the
    environment (:func:`app_from_env`); one process per pod is the usual shape in Kubernetes.
    """
    if workers > 1:
        uvicorn.run(
            "rsi_worker.service.server:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            timeout_graceful_shutdown=GRACEFUL_S,
            proxy_headers=True,
        )
        return
    from rsi_worker.service.app import create_app
    from rsi_worker.service.state import build_state

    svc = build_state(settings)
    uvicorn.Server(_config(create_app(svc), host, port, log_level=log_level)).run()


def app_from_env() -> Any:
    """The app of a uvicorn worker process, built from the ``RSI_*`` environment."""
    from rsi_worker.service.app import create_app
    from rsi_worker.service.state import build_state

    return create_app(build_state(Settings()))


class LiveServer:
    """uvicorn serving ``app`` on a thread, on a socket bound before start (port 0 = any free port).

    Args:
        app: the ASGI app.
        host: address to bind (loopback by default).
        port: port (0 = a free one; see :attr:`url`).
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = self.sock.getsockname()[:2]
        self.server = uvicorn.Server(_config(app, host, self.port))
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="rsi-service", daemon=True
        )

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> LiveServer:
        """Start and wait until the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the service did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """End the event streams, ask uvicorn to exit and wait for the thread."""
        svc = getattr(getattr(self.app, "state", None), "svc", None)
        if svc is not None:
            svc.hub.stop()
        self.server.should_exit = True
        self._thread.join(timeout_s)
        self.sock.close()

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
