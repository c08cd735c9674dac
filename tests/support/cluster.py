"""Real Celery worker processes of rsi-worker for integration tests.

Workers are started as subprocesses with ``rsi worker`` (the same command operators run) against
a real redis-server and a database URL; tests drive them through the host API or the dispatcher
and wait on SQL state with deadlines (no bare sleeps).

Workers run ``--no-supervise`` (as in the Kubernetes Deployment and compose) unless a test asks for
the supervisor (``supervise=True``, e.g. when it restarts the broker under the workers): a supervised
worker is two Python processes that each import the whole CLI, about twice the start-up CPU and
4 s more to stop (docs/dev/testing.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from rsi_common.db import RunRow, make_engine, session_factory

REPO = Path(__file__).resolve().parents[2]


def worker_env(db_url: str, redis_url: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a worker: no inherited RSI_* settings, zero model backoff."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RSI_")}
    env.update(RSI_DATABASE_URL=db_url, RSI_REDIS_URL=redis_url, RSI_HOME=str(home),
               RSI_MODEL_BACKOFF_S="0", RSI_LOG_FORMAT="text")
    env.update(extra)
    return env


class Cluster:
    """``n`` worker processes (threads pool) sharing one broker and one database."""

    def __init__(self, tmp: Path, db_url: str, redis_url: str, *, n: int = 2, concurrency: int = 8,
                 env: Mapping[str, str] | None = None, supervise: bool = False) -> None:
        self.tmp, self.db_url, self.redis_url = tmp, db_url, redis_url
        self.n, self.concurrency, self.supervise = n, concurrency, supervise
        self.env = worker_env(db_url, redis_url, tmp / "home", **dict(env or {}))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.engine = make_engine(db_url)
        self.sessions = session_factory(self.engine)

    def start(self) -> Cluster:
        for i in range(self.n):
            self.procs.append(self._spawn(i))
        return self

    def _spawn(self, i: int) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"worker{i}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [sys.executable, "-m", "rsi_worker.cli", "worker", "-c", str(self.concurrency),
             "-n", f"w{i}-{os.getpid()}@%h", "-l", "WARNING", *self.supervision()],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return proc

    def supervision(self) -> list[str]:
        """``rsi worker``'s option: none (supervised by a parent process) or ``--no-supervise``."""
        return [] if self.supervise else ["--no-supervise"]

    def kill(self, i: int) -> None:
        """``kill -9`` worker ``i`` and its supervisor, if any (no warm shutdown: in-flight tasks are
        not acknowledged)."""
        proc = self.procs[i]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def restart(self, i: int) -> None:
        self.procs[i] = self._spawn(i)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.engine.dispose()

    def logs(self) -> str:
        return "\n".join((self.tmp / f"worker{i}.log").read_text(errors="replace")[-4000:]
                         for i in range(self.n) if (self.tmp / f"worker{i}.log").exists())

    def runs(self, agent: str | None = None) -> list[RunRow]:
        """Run rows (of ``agent``), oldest first."""
        with self.sessions() as s:
            stmt = sa.select(RunRow).order_by(RunRow.started_at, RunRow.fence)
            if agent is not None:
                stmt = stmt.where(RunRow.agent_id == agent)
            rows = list(s.execute(stmt).scalars())
            s.commit()
        return rows

    def wait_for(self, what: str, predicate: Callable[[], Any], timeout_s: float = 120.0) -> Any:
        """Poll ``predicate`` until it returns a truthy value; fail with the workers' logs. The
        default bound is generous (worker start-up and a run take several times longer on a loaded
        2-core machine): the poll returns as soon as the predicate holds."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}\n--- worker logs ---\n{self.logs()}")

    def finished(self, agent: str, n: int = 1) -> list[RunRow]:
        """Wait until ``agent`` has ``n`` finished runs and none running; returns its runs."""
        def done() -> list[RunRow] | None:
            rows = self.runs(agent)
            closed = [r for r in rows if r.status != "running"]
            return rows if len(closed) >= n and len(closed) == len(rows) else None

        return list(self.wait_for(f"{n} finished run(s) of {agent}", done))

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
