"""Traffic shapes on the real cluster: bursts for one agent, many agents at once, a Redis restart."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.db import WorldRow
from rsi_common.dispatch import KombuDispatcher
from rsi_common.llm import make_client
from rsi_worker.cluster.sweeper import sweep
from rsi_worker.jobs.scenario import CORRECTION, conversation_turn, next_history
from rsi_worker.local.servers import RedisServer
from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(240)
REQUEST = "Compare laptops: use search query=laptops"


def host(tmp_path: Path, server: RedisServer) -> RsiClient:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", redis_url=server.url,
                        model_backoff_s=0, home=tmp_path / "home")
    from rsi_common.db import make_engine, upgrade

    engine = make_engine(settings.database_url)
    upgrade(engine)
    engine.dispose()
    return RsiClient(settings, dispatcher=KombuDispatcher(server.url))


def conversation(agent: str, conv: str, turns: list[str], clock: float) -> list[Any]:
    """Live turns of one conversation with the sim policy (H0), not yet recorded."""
    policy = make_client("sim", "sim-1", Settings(), role="policy")
    history: list[dict[str, Any]] = []
    out = []
    for n, text in enumerate(turns, start=1):
        turn = conversation_turn(policy, None, agent, conv, n, text, history, clock=clock + n)
        history = next_history(history, text, turn.answer)
        out.append(turn)
    return out


def test_burst_for_one_agent_gives_one_run_and_one_rerun(tmp_path: Path, redis_srv: RedisServer) -> None:
    client = host(tmp_path, redis_srv)
    turns = [t for i in range(50) for t in conversation("shop", f"c{i}", [REQUEST, CORRECTION], 1e9 + 10 * i)]
    # 100 turns within a second, while no worker runs yet: the first takes the lease, the rest
    # collapse into one pending mark holding the newest turn
    outcomes = [client.record_turn("shop", t).dispatched for t in turns]
    assert outcomes.count("enqueued") == 1 and outcomes.count("pending") == 99
    with Cluster(tmp_path, client.settings.database_url, redis_srv.url, n=2) as cluster:
        runs = cluster.finished("shop", n=2)
        assert len(runs) == 2, [(r.status, r.io_id) for r in runs]
        assert runs[0].io_id == turns[0].world["io_id"]
        assert runs[1].io_id == turns[-1].world["io_id"]  # exactly one re-run, for the newest turn
        # the first run already saw every stored turn and adopted; the re-run finds nothing to fix
        assert runs[0].status == "adopted", (runs[0].reason, runs[0].error)
        assert runs[1].status in ("kept", "recorded"), runs[1].reason
    client.close()


def test_twenty_agents_consolidate_in_parallel(tmp_path: Path, redis_srv: RedisServer) -> None:
    client = host(tmp_path, redis_srv)
    agents = [f"shop{i:02d}" for i in range(20)]
    batches = {a: conversation(a, "c1", [REQUEST, CORRECTION], 1e9) for a in agents}
    env = {"RSI_SIM_LATENCY_MS": "150"}
    with Cluster(tmp_path, client.settings.database_url, redis_srv.url, n=2, env=env) as cluster:
        threads = [threading.Thread(target=lambda a=a: [client.record_turn(a, t) for t in batches[a]])
                   for a in agents]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        runs = {a: [r for r in cluster.finished(a) if r.status != "recorded"] for a in agents}
    decided = [rs[-1] for rs in runs.values()]
    assert all(r.status == "adopted" for r in decided), [(r.agent_id, r.status, r.reason) for r in decided]
    latest_start = max(r.started_at for r in decided)
    earliest_end = min(r.finished_at for r in decided if r.finished_at is not None)
    assert latest_start < earliest_end  # all 20 rounds were in flight at the same moment
    client.close()


def test_redis_restart_mid_run_loses_no_world_and_the_sweeper_reruns(tmp_path: Path,
                                                                       redis_srv: RedisServer) -> None:
    client = host(tmp_path, redis_srv)
    turns = conversation("shop", "c1", [REQUEST, CORRECTION], 1e9)
    env = {"RSI_SIM_LATENCY_MS": "300"}
    # Supervised: a worker whose broker vanishes mid-delivery may exit and must be started again.
    with Cluster(tmp_path, client.settings.database_url, redis_srv.url, n=2, env=env,
                 supervise=True) as cluster:
        for t in turns:
            client.record_turn("shop", t)
        cluster.wait_for("a round to replay", lambda: any(
            (r.params or {}).get("phase") in ("drafting", "candidates") for r in cluster.runs("shop")))
        redis_srv.restart()  # every key is gone: queues, chord counters, leases, pending marks
        with cluster.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(WorldRow)).scalar_one() == 2

        def swept_and_done() -> bool:
            sweep(client._sessions, client.coord, client.dispatcher, client.settings)
            runs = cluster.runs("shop")
            return bool(runs) and runs[-1].status not in ("running", "interrupted") and \
                all(r.status != "running" for r in runs)

        cluster.wait_for("the sweeper to re-run the interrupted run", swept_and_done, timeout_s=120)
        runs = cluster.runs("shop")
    assert runs[0].status in ("interrupted", "adopted")
    assert runs[-1].status == "adopted" and runs[-1].io_id in {t.world["io_id"] for t in turns}
    client.close()
