"""Process entry points for the multi-process lease test (importable by a spawned interpreter)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from rsi_common.coord import Coordinator


def race_try_begin(url: str, agent: str, proc: int, n_threads: int, start: Any, out: Any) -> None:
    """Wait for every process at ``start`` (a multiprocessing barrier), then call ``try_begin``
    from ``n_threads`` threads at once; put ``[(io, fence or None), ...]`` on ``out``."""
    client = redis.Redis.from_url(url)
    coord = Coordinator(client, lease_s=30)
    local = threading.Barrier(n_threads)

    def one(i: int) -> tuple[str, int | None]:
        io = f"p{proc}-t{i}"
        local.wait()
        lease = coord.try_begin(agent, io)
        return io, lease.fence if lease else None

    start.wait()
    with ThreadPoolExecutor(n_threads) as pool:
        out.put(list(pool.map(one, range(n_threads))))
    client.close()
