"""The one-command local mode (docs/architecture.md#5-modes): a whole cluster under ``settings.home``.

* **embedded, redis binary** — when ``redis-server`` is on PATH: a private server on a unix
  socket under ``<home>/redis/``, SQLite under ``<home>/``, and ``workers`` real ``rsi worker``
  processes. Crash recovery works as in production (late acks, redelivery).
* **embedded, in-process** — on a bare machine: the ``memory://`` broker, the ``cache+memory://``
  result backend, a threads-pool worker inside this process and the coordination scripts on
  fakeredis. The same tasks and steps run; a crash loses the in-flight runs (said on start).

Host code talks to either through :meth:`EmbeddedCluster.client` (an :class:`RsiClient` wired to
the right broker and coordination store).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.db import make_engine, upgrade
from rsi_common.dispatch import KombuDispatcher
from rsi_worker.local.servers import RedisServer, redis_server_bin

__all__ = ["EmbeddedCluster", "Mode"]

Mode = Literal["embedded-redis", "in-process"]
IN_PROCESS_NOTICE = "in-process mode: no redis-server found; a crash loses in-flight consolidations"


class EmbeddedCluster:
    """A private cluster for ``rsi demo``, ``rsi loadtest --embedded`` and local experiments.

    Args:
        settings: base settings; ``redis_url`` is replaced, ``database_url`` defaults to
            ``<home>/rsi.db`` when it is the default.
        workers: worker processes (redis mode); the in-process mode runs one threads-pool worker.
        concurrency: threads per worker.
        mode: force a mode (default: redis when the binary exists).
    """

    def __init__(
        self, settings: Settings, *, workers: int = 1, concurrency: int = 8, mode: Mode | None = None
    ) -> None:
        self.home = Path(settings.home).resolve()
        db_url = settings.database_url
        if db_url == Settings.model_fields["database_url"].default:
            db_url = f"sqlite:///{self.home / 'rsi.db'}"
        self.mode: Mode = mode or ("embedded-redis" if redis_server_bin() else "in-process")
        self.base = settings.model_copy(update={"database_url": db_url, "home": self.home})
        self.settings = self.base
        self.workers, self.concurrency = workers, concurrency
        self.redis: RedisServer | None = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self._stack = contextlib.ExitStack()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> EmbeddedCluster:
        self.home.mkdir(parents=True, exist_ok=True)
        engine = make_engine(self.base.database_url)
        upgrade(engine)
        engine.dispose()
        if self.mode == "embedded-redis":
            self.redis = RedisServer(self.home / "redis", unix_socket=True).start()
            self.settings = self.base.model_copy(update={"redis_url": self.redis.url})
            self.procs = [self._spawn(i) for i in range(self.workers)]
        else:
            self.settings = self.base.model_copy(update={"redis_url": None})
            self._stack.enter_context(self._in_process_worker())
        return self

    def _env(self) -> dict[str, str]:
        # The workers get this cluster's settings (sim latency, consolidation parameters, model
        # factory, …), not only what happens to be in this process's environment.
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RSI_")}
        env.update(self.settings.to_env())
        env.update(
            RSI_DATABASE_URL=self.settings.database_url,
            RSI_HOME=str(self.home),
            RSI_REDIS_URL=self.settings.redis_url or "",
        )
        return env

    def _spawn(self, i: int) -> subprocess.Popen[bytes]:
        log = open(self.home / f"worker{i}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rsi_worker.cli",
                "worker",
                "-c",
                str(self.concurrency),
                "-n",
                f"embedded{i}-{os.getpid()}@%h",
                "-l",
                "WARNING",
            ],
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return proc

    @contextlib.contextmanager
    def _in_process_worker(self) -> Iterator[Any]:
        from celery.contrib.testing.worker import start_worker

        from rsi_worker.cluster.app import create_app

        app = create_app(self.settings)
        with start_worker(
            app,
            concurrency=self.concurrency,
            pool="threads",
            loglevel="WARNING",
            perform_ping_check=False,
            shutdown_timeout=30,
        ) as worker:
            yield worker

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Wait until every worker process answers a ping (redis mode; in-process is ready at once).

        ``timeout_s`` bounds a start on a loaded machine (each process imports Celery, SQLAlchemy
        and the pipeline); an idle one answers within a few seconds."""
        if self.mode != "embedded-redis":
            return
        from rsi_worker.cluster.app import create_app

        app = create_app(self.settings)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"an embedded worker exited ({p.returncode}); see {self.home}/worker*.log"
                    )
            replies = app.control.ping(timeout=0.5) or []
            if len(replies) >= len(self.procs):
                return
        raise RuntimeError(f"embedded workers not ready after {timeout_s}s; see {self.home}/worker*.log")

    def client(self) -> RsiClient:
        """A host client wired to this cluster's broker and coordination store."""
        from rsi_worker.runtime import redis_client

        if self.mode == "embedded-redis":
            assert self.redis is not None
            return RsiClient(self.settings, dispatcher=KombuDispatcher(self.redis.url))
        return RsiClient(
            self.settings, redis=redis_client(self.settings), dispatcher=KombuDispatcher("memory://")
        )

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        self.procs = []
        self._stack.close()
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
