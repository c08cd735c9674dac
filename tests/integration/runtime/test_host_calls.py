"""The host's sub-agent calls on a real redis-server (BLPOP with a fractional timeout, the done mark
pushed back) and on SQLite and PostgreSQL (the catalog row locked ``FOR UPDATE``)
(docs/runtime/README.md#host-api)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import InvalidInput
from rsi_common.runtime import keys
from rsi_common.runtime.host import RuntimeClient
from tests.support.runtime_policy import CATALOG

pytestmark = pytest.mark.timeout(120)


def test_spawn_wait_and_catalog_on_real_backends(engine: Engine, redis_url: str, tmp_path: Path) -> None:
    r = redis.Redis.from_url(redis_url)
    client = RsiClient(Settings(database_url=str(engine.url), home=tmp_path), engine=engine, redis=r,
                       dispatcher=RecordingDispatcher())
    woken: list[tuple[str, str]] = []
    rc = RuntimeClient(client, wake=lambda a, s: woken.append((a, s)), actor="operator:it")
    try:
        rc.register("lab", {"subagents": CATALOG})
        first = rc.spawn("lab", "researcher", "one", request_id="r1")
        assert rc.spawn("lab", "researcher", "one", request_id="r1")["handle"] == first["handle"]
        assert woken == [("lab.researcher", first["handle"])]
        h = first["handle"]
        assert rc.wait([h], timeout_s=0.2) == {"results": [], "pending": [h], "timed_out": True}

        out: list[dict[str, Any]] = []
        waiters = [threading.Thread(target=lambda: out.append(rc.wait([h], timeout_s=60))) for _ in range(2)]
        for w in waiters:
            w.start()
        with pytest.raises(InvalidInput, match=r"^name: spec 'researcher' has 1 live handle"):
            rc.set_subagent_spec("lab", "researcher", None)
        assert rc.cancel(h, "done") == [h]
        for w in waiters:
            w.join(90)
        assert [w.is_alive() for w in waiters] == [False, False]
        assert [o["results"][0]["status"] for o in out] == ["cancelled", "cancelled"]
        assert r.llen(keys.handle_done(h)) == 1  # both waiters woke; the mark is still there
        assert rc.set_subagent_spec("lab", "researcher", None)["catalog"] == []
    finally:
        client.close()
