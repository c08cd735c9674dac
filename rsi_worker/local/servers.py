"""Private ``redis-server`` and PostgreSQL processes for embedded mode, tests and benchmarks.

Both are real servers from the Debian packages, started as child processes on loopback or a
unix socket, with all their files under one working directory. Nothing here is used in the
distributed mode, where the platform runs Redis and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path

__all__ = [
    "PostgresServer",
    "RedisServer",
    "ServerUnavailable",
    "find_postgres_bin",
    "free_port",
    "redis_server_bin",
]


class ServerUnavailable(RuntimeError):
    """The server binary is not installed or the server did not come up."""


def free_port() -> int:
    """An unused TCP port on 127.0.0.1 (racy by nature; servers are retried on clash)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_bin() -> str | None:
    """Path of ``redis-server`` on PATH (or the Debian location), else ``None``."""
    found = shutil.which("redis-server")
    if found:
        return found
    return "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None


def find_postgres_bin(name: str) -> str | None:
    """Path of a PostgreSQL server tool (``initdb``, ``pg_ctl``), PATH first, then Debian's dirs."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


class RedisServer:
    """One ``redis-server`` child process without persistence.

    Args:
        workdir: directory for the server's files (created).
        unix_socket: listen on ``<workdir>/redis.sock`` only (embedded mode) instead of a
            loopback TCP port (tests: the same port survives :meth:`restart`).
    """

    def __init__(self, workdir: Path, *, unix_socket: bool = False) -> None:
        self.workdir = Path(workdir)
        self.unix_socket = unix_socket
        self.port = 0 if unix_socket else free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def socket_path(self) -> Path:
        return self.workdir / "redis.sock"

    @property
    def url(self) -> str:
        """URL for redis-py and kombu (``redis://`` or ``redis+socket://``)."""
        if self.unix_socket:
            return f"redis+socket://{self.socket_path}"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def client_url(self) -> str:
        """URL for ``redis.Redis.from_url`` (``unix://`` instead of kombu's ``redis+socket://``)."""
        if self.unix_socket:
            return f"unix://{self.socket_path}"
        return self.url

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        binary = redis_server_bin()
        if binary is None:
            raise ServerUnavailable(
                "redis-server is not installed: run `apt-get install -y redis-server` "
                "(Debian/Ubuntu) or put redis-server on PATH"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [binary, "--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        if self.unix_socket:
            args += ["--port", "0", "--unixsocket", str(self.socket_path), "--unixsocketperm", "700"]
        else:
            args += ["--port", str(self.port), "--bind", "127.0.0.1"]
        log = open(self.workdir / "redis.log", "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        import redis

        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerUnavailable(f"redis-server exited with {self.proc.returncode}")
            try:
                with redis.Redis.from_url(self.client_url, socket_timeout=1) as r:
                    if r.ping():
                        return
            except Exception as exc:  # not up yet
                last = exc
            time.sleep(0.02)
        raise ServerUnavailable(f"redis-server did not answer within {timeout_s}s: {last}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same address; every key is gone (no persistence)."""
        self.stop()
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _let_others_traverse(path: Path) -> None:
    """Add o+x to ``path`` and its ancestors so the ``postgres`` user can reach its data dir."""
    for p in (path, *path.parents):
        mode = p.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(p, mode | stat.S_IXOTH)


class PostgresServer:
    """A throw-away PostgreSQL cluster on a unix socket, trust auth, one database.

    As root the cluster runs as the ``postgres`` system user (PostgreSQL refuses root).
    """

    def __init__(self, workdir: Path, *, database: str = "rsi") -> None:
        self.workdir = Path(workdir)
        self.datadir = self.workdir / "data"
        self.sockdir = self.workdir / "sock"
        self.database = database
        self.port = free_port()
        self._user: str | None = None

    @property
    def url(self) -> str:
        """SQLAlchemy URL (psycopg 3 driver) of the database."""
        return f"postgresql+psycopg://postgres@/{self.database}?host={self.sockdir}&port={self.port}"

    def _run(self, args: list[str]) -> subprocess.CompletedProcess[bytes]:
        if self._user:
            args = ["runuser", "-u", self._user, "--", *args]
        return subprocess.run(args, capture_output=True, check=False, timeout=120)

    def start(self) -> PostgresServer:
        initdb, pg_ctl = find_postgres_bin("initdb"), find_postgres_bin("pg_ctl")
        if not initdb or not pg_ctl:
            raise ServerUnavailable(
                "PostgreSQL server tools are not installed: run `apt-get install -y postgresql`"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.sockdir.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            self._user = "postgres"
            pw = pwd.getpwnam(self._user)
            for p in (self.workdir, self.sockdir):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            _let_others_traverse(self.workdir.resolve().parent)
        if not (self.datadir / "PG_VERSION").exists():
            done = self._run([initdb, "-D", str(self.datadir), "-U", "postgres", "--auth=trust",
                              "-E", "UTF8", "--no-sync"])
            if done.returncode:
                raise ServerUnavailable(f"initdb failed: {done.stderr.decode(errors='replace')[-800:]}")
        opts = (f"-p {self.port} -k {self.sockdir} -c listen_addresses='' -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        done = self._run([pg_ctl, "-D", str(self.datadir), "-o", opts, "-l",
                          str(self.workdir / "postgres.log"), "-w", "-t", "60", "start"])
        if done.returncode:
            log = (self.workdir / "postgres.log")
            tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
            raise ServerUnavailable(f"pg_ctl start failed: {done.stderr.decode(errors='replace')} {tail}")
        self._create_database()
        return self

    def _create_database(self) -> None:
        import psycopg

        with psycopg.connect(host=str(self.sockdir), port=self.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                  (self.database,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.database}"')

    def stop(self) -> None:
        pg_ctl = find_postgres_bin("pg_ctl")
        if pg_ctl and (self.datadir / "postmaster.pid").exists():
            self._run([pg_ctl, "-D", str(self.datadir), "-m", "immediate", "-w", "stop"])

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.stop()
