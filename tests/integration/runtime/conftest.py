"""Shared by the runtime's cluster tests: workers of queue ``agents`` and a migrated PostgreSQL
database (a copy of the session's template, docs/dev/testing.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rsi_common.dispatch import QUEUE_AGENTS
from rsi_worker.local.servers import PostgresServer
from tests.conftest import new_pg_database
from tests.support.cluster import REPO, Cluster


class AgentsCluster(Cluster):
    """Workers of queue ``agents`` only (threads pool)."""

    def _spawn(self, i: int) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"worker{i}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [sys.executable, "-m", "rsi_worker.cli", "worker", "-Q", QUEUE_AGENTS, "-c",
             str(self.concurrency), "-n", f"a{i}-{os.getpid()}@%h", "-l", "WARNING", *self.supervision()],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return proc


@pytest.fixture
def pg_url(pg_server: PostgresServer, pg_template: str) -> str:
    """A new, migrated database on the session PostgreSQL."""
    return new_pg_database(pg_server, pg_template)
