"""Faults injected into an embedded cluster while load runs (docs/operations/chaos.md).

:class:`ChaosCluster` wraps an :class:`~rsi_worker.local.embedded.EmbeddedCluster` started on a
private PostgreSQL (when its binaries exist; else SQLite, and no database fault) and adds the one
``rsi beat`` process a production cluster runs. :class:`Injector` runs a :class:`ChaosPlan` on a
thread: ``kill -9`` of a random worker process at a rate (the process is started again at once, as a
supervisor would), Redis restarts (no persistence: every key is wiped), database restarts (``pg_ctl
restart -m fast``) and broker pauses (``SIGSTOP`` of redis-server for ``pause_s``). Each fault is
logged with its time and the runs that were ``running`` when it struck, for the report
(:mod:`rsi_worker.chaos.report`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from rsi_common.config import Settings
from rsi_common.db import RunRow, make_engine
from rsi_common.errors import InvalidInput
from rsi_worker.local.embedded import EmbeddedCluster
from rsi_worker.local.servers import PostgresServer, find_postgres_bin

__all__ = ["ChaosCluster", "ChaosPlan", "Fault", "Injector"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChaosPlan:
    """What to inject over ``duration_s`` seconds of load.

    Attributes:
        kills: ``kill -9`` of a random worker process, spread evenly over the load.
        redis_restarts: restarts of redis-server (broker, results and coordination; keys wiped).
        db_restarts: restarts of the PostgreSQL server (``-m fast``).
        broker_pauses: ``SIGSTOP`` of redis-server for ``pause_s`` seconds each.
        pause_s: length of one broker pause.
        seed: seed of the victims and of the order of the faults.
    """

    duration_s: float
    kills: int = 20
    redis_restarts: int = 1
    db_restarts: int = 1
    broker_pauses: int = 0
    pause_s: float = 5.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("kills", "redis_restarts", "db_restarts", "broker_pauses"):
            if not 0 <= int(getattr(self, name)) <= 10_000:
                raise InvalidInput(f"{name}: must be between 0 and 10000")
        if not (0 < self.duration_s <= 86_400 and 0 < self.pause_s <= 300):
            raise InvalidInput("duration_s must be in (0, 86400] and pause_s in (0, 300]")

    def schedule(self) -> list[tuple[float, str]]:
        """``(seconds after the start, kind)`` of every fault, in order: evenly spaced per kind in
        the middle 80 % of the load (the last 10 % is left for recovery under load)."""
        out: list[tuple[float, str]] = []
        for kind, n in (("kill", self.kills), ("redis_restart", self.redis_restarts),
                        ("db_restart", self.db_restarts), ("broker_pause", self.broker_pauses)):
            for i in range(n):
                out.append((self.duration_s * (0.1 + 0.8 * (i + 0.5) / n), kind))
        rng = random.Random(self.seed)
        return sorted(out, key=lambda x: (x[0], rng.random()))


@dataclass
class Fault:
    """One injected fault: its kind, when (epoch seconds), what it hit, and the runs it may affect."""

    kind: str
    at: float
    target: str = ""
    took_s: float = 0.0
    running: list[tuple[str, str]] = field(default_factory=list)
    """``(run id, agent id)`` of the runs ``running`` when the fault struck."""
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "at": round(self.at, 3), "target": self.target,
                "took_s": round(self.took_s, 3), "runs_running": len(self.running), "error": self.error}


class ChaosCluster:
    """An embedded cluster with a private PostgreSQL (if installed) and one beat process."""

    def __init__(self, settings: Settings, home: Path, *, workers: int, concurrency: int) -> None:
        self.home = home
        self.pg: PostgresServer | None = None
        self.settings = settings
        self.workers, self.concurrency = workers, concurrency
        self.cluster: EmbeddedCluster | None = None
        self.beat: subprocess.Popen[bytes] | None = None
        self._stack = contextlib.ExitStack()

    def start(self) -> ChaosCluster:
        settings = self.settings.model_copy(update={"home": self.home})
        if find_postgres_bin("pg_ctl") and find_postgres_bin("initdb"):
            self.pg = PostgresServer(self.home / "pg").start()
            self._stack.callback(self.pg.stop)
            settings = settings.model_copy(update={"database_url": self.pg.url})
        self.cluster = EmbeddedCluster(settings, workers=self.workers, concurrency=self.concurrency,
                                       mode="embedded-redis")
        self._stack.enter_context(self.cluster)
        self.cluster.wait_ready(120.0)
        self.beat = self._spawn_beat()
        self._stack.callback(self._stop_beat)
        return self

    def _spawn_beat(self) -> subprocess.Popen[bytes]:
        assert self.cluster is not None
        out = open(self.home / "beat.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen([sys.executable, "-m", "rsi_worker.cli", "beat", "-l", "WARNING"],
                                env=self.cluster._env(), stdout=out, stderr=subprocess.STDOUT)
        out.close()
        return proc

    def _stop_beat(self) -> None:
        if self.beat is not None and self.beat.poll() is None:
            self.beat.terminate()
            try:
                self.beat.wait(20)
            except subprocess.TimeoutExpired:
                self.beat.kill()
                self.beat.wait(10)

    @property
    def db_url(self) -> str:
        assert self.cluster is not None
        return self.cluster.settings.database_url

    def running_runs(self) -> list[tuple[str, str]]:
        """``(run id, agent id)`` of the ``running`` runs (an empty list when the database is down)."""
        engine = make_engine(self.db_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.select(RunRow.id, RunRow.agent_id).where(RunRow.status == "running"))
                return [(str(r), str(a)) for r, a in rows]
        except Exception:
            return []
        finally:
            engine.dispose()

    # --- faults -------------------------------------------------------------------------------

    def kill_worker(self, rng: random.Random) -> str:
        """``kill -9`` a random worker process and start it again (a supervisor's restart)."""
        assert self.cluster is not None
        i = rng.randrange(len(self.cluster.procs))
        proc = self.cluster.procs[i]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        self.cluster.procs[i] = self.cluster._spawn(i)
        return f"worker {i} (pid {proc.pid})"

    def restart_redis(self) -> str:
        assert self.cluster is not None and self.cluster.redis is not None
        self.cluster.redis.restart()
        return "redis-server"

    def restart_db(self) -> str:
        if self.pg is None:
            raise RuntimeError("no PostgreSQL server (SQLite): database restart not possible")
        pg_ctl = find_postgres_bin("pg_ctl")
        assert pg_ctl is not None
        # fast mode: clients are disconnected and the WAL is flushed (the test server commits
        # asynchronously; an immediate stop would lose acknowledged commits, which is not the fault)
        done = self.pg._run([pg_ctl, "-D", str(self.pg.datadir), "-m", "fast", "-w", "-t", "60", "stop"])
        if done.returncode:
            raise RuntimeError(f"pg_ctl stop failed ({done.returncode})")
        self.pg.start()
        return "postgresql"

    def pause_broker(self, seconds: float) -> str:
        assert self.cluster is not None and self.cluster.redis is not None and self.cluster.redis.proc
        pid = self.cluster.redis.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        return f"redis-server paused {seconds:g} s"

    def stop(self) -> None:
        self._stack.close()

    def __enter__(self) -> ChaosCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Injector:
    """Runs a :class:`ChaosPlan` against a :class:`ChaosCluster` on a daemon thread."""

    def __init__(self, cluster: ChaosCluster, plan: ChaosPlan) -> None:
        self.cluster, self.plan = cluster, plan
        self.faults: list[Fault] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rng = random.Random(plan.seed)

    @contextlib.contextmanager
    def running(self) -> Iterator[Injector]:
        """Inject while the ``with`` block runs (the load); waits for the last fault to finish."""
        start = time.time()
        self._thread = threading.Thread(target=self._run, args=(start,), name="rsi-chaos", daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._thread.join()

    def _run(self, start: float) -> None:
        for offset, kind in self.plan.schedule():
            delay = start + offset - time.time()
            if delay > 0 and self._stop.wait(delay):
                return
            fault = Fault(kind, time.time(), running=self.cluster.running_runs())
            t0 = time.monotonic()
            try:
                if kind == "kill":
                    fault.target = self.cluster.kill_worker(self.rng)
                elif kind == "redis_restart":
                    fault.target = self.cluster.restart_redis()
                elif kind == "db_restart":
                    fault.target = self.cluster.restart_db()
                else:
                    fault.target = self.cluster.pause_broker(self.plan.pause_s)
            except Exception as exc:  # reported; the plan goes on
                fault.error = f"{type(exc).__name__}: {exc}"[:200]
                log.warning("chaos: %s failed: %s", kind, fault.error)
            fault.took_s = time.monotonic() - t0
            self.faults.append(fault)
