"""``rsi bench api``: the service against the library, in one run (issue 14).

1. **record_turn, in-process vs HTTP at the same load**: ``clients`` threads record ``n_turns`` turns
   through :meth:`RsiClient.record_turn`, then the same number of threads record as many turns (new
   io ids, same worlds and agents) through :class:`~rsi_common.http_client.RsiHttpClient` against
   ``rsi serve`` running as its own process on the same SQLite file and private redis-server.
   Reported: throughput and p50/p99 per path; target HTTP p99 ≤ 2 × in-process p99.
2. **Console agent page**: an agent with ``n_runs`` stored runs (each with a judged round, so every
   run is a point of the plots) is rendered by ``GET /console/agents/<id>`` 20 times; reported: the
   server-side render time (the ``Server-Timing`` header: reads, plots and template) p50 / max and the
   whole request; target < 200 ms.
3. **Harness events**: 20 rollbacks through the API, each timed until the remote client's event
   stream reports it (the issue's one-second budget).

Rate limits are off for the benchmark's tokens (``RSI_API_RATE_PER_MIN=0``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from rsi_common import db
from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.http_client import RsiHttpClient
from rsi_worker.bench.ingest import _turns, stats_ms
from rsi_worker.bench.replay import generate_worlds
from rsi_worker.local.servers import RedisServer, free_port

__all__ = ["bench_api"]

P99_RATIO_TARGET = 2.0
RENDER_TARGET_MS = 200.0
EVENT_TARGET_MS = 1000.0


def _record(client: Any, turns: list[tuple[str, dict[str, Any]]], threads: int) -> tuple[list[float], float]:
    lat: list[float] = []
    lock = threading.Lock()

    def one(item: tuple[str, dict[str, Any]]) -> None:
        t0 = time.perf_counter()
        client.record_turn(*item)
        dt = time.perf_counter() - t0
        with lock:
            lat.append(dt)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, turns))
    return lat, time.perf_counter() - start


@contextlib.contextmanager
def _service(settings: Settings, home: Path) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RSI_")}
    env.update(settings.to_env())
    env.update(RSI_API_RATE_PER_MIN="0")
    log = open(home / "serve.log", "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "rsi_worker.cli", "serve", "--port", str(port), "--log-level", "warning"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rsi serve did not start; see {home / 'serve.log'}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _round_result(i: int, adopted: bool) -> dict[str, Any]:
    s = round(0.3 + 0.4 * ((i * 37) % 100) / 100, 4)
    cands = [
        {
            "variant": v,
            "outcome": "ACCEPTED" if adopted and v == "A" else "LOST",
            "S": min(1.0, s + d),
            "delta_S": d,
            "delta_C": 0.2,
            "reason": "bench",
            "reason_code": "admissible",
            "components": ["prompt"],
            "early_stopped": False,
        }
        for v, d in (("A", 0.1), ("B", -0.05))
    ]
    return {
        "status": "adopted" if adopted else "recorded",
        "reason": "bench",
        "round": {
            "t": i,
            "b_t": 2,
            "sigma": 0,
            "delta": 0.12,
            "S_star": s,
            "worlds": ["w_1"],
            "incumbent": {"S": s, "C": 300.0, "sources": {"replay": 16}},
            "candidates": cands,
        },
        "usage": {},
        "spend": {"tokens": 50_000 + (i % 7) * 1000, "role_tokens": 40_000, "replay_tokens": 10_000},
    }


def _seed_runs(sessions: Any, agent: str, n: int) -> None:
    with sessions.begin() as s:
        db.ensure_agent(s, agent)
        for i in range(n):
            run = db.start_run(s, agent, fence=i + 1, io_id=f"io-{i}", retention=None)
            adopted = i % 10 == 0
            run.status = "adopted" if adopted else "recorded"
            run.reason = "bench"
            run.result = _round_result(i, adopted)
            run.finished_at = db.db_now()
        s.flush()


def _render(url: str, cookie: str, agent: str, n: int = 20) -> dict[str, Any]:
    server_ms, wall_ms = [], []
    with httpx.Client(base_url=url, cookies={"rsi_console": cookie}, timeout=30) as c:
        c.get(f"/console/agents/{agent}")  # warm-up (template compile, caches)
        for _ in range(n):
            t0 = time.perf_counter()
            r = c.get(f"/console/agents/{agent}")
            wall_ms.append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()
            server_ms.append(float(r.headers["server-timing"].split("dur=")[1]))
        points = r.text.count('class="pt pt-incumbent"')
    return {
        "render_p50_ms": round(sorted(server_ms)[len(server_ms) // 2], 1),
        "render_max_ms": round(max(server_ms), 1),
        "request_p50_ms": round(sorted(wall_ms)[len(wall_ms) // 2], 1),
        "plot_points": points,
    }


def _events(
    url: str, host: str, operator: str, agent: str, versions: list[str], n: int = 20
) -> dict[str, Any]:
    got = threading.Event()
    lat: list[float] = []
    with (
        RsiHttpClient(url, host, backoff_s=0) as client,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {operator}"}, timeout=30) as op,
    ):
        client.on_change = lambda e: got.set()
        if not client.start_listener(10):
            raise RuntimeError("the event stream did not connect")
        for i in range(n):
            got.clear()
            t0 = time.perf_counter()
            op.post(f"/v1/agents/{agent}/rollback", json={"version": versions[i % 2]}).raise_for_status()
            if got.wait(10):
                lat.append(time.perf_counter() - t0)
    return {"events": len(lat), **{f"event_{k}": v for k, v in stats_ms(lat).items() if k != "n"}}


def bench_api(
    n_turns: int = 2000, clients: int = 8, n_agents: int = 50, n_runs: int = 1000
) -> dict[str, Any]:
    """Run the three measurements (module docstring) on private servers; returns the report."""
    template = [w.data for w in generate_worlds(6)]
    with tempfile.TemporaryDirectory(prefix="rsi-bench-api-") as tmp_:
        tmp = Path(tmp_)
        redis = RedisServer(tmp / "redis").start()
        try:
            settings = Settings(
                database_url=f"sqlite:///{tmp / 'bench.db'}",
                redis_url=redis.url,
                home=tmp,
                run_retention=max(200, n_runs + 10),
            )
            engine = db.make_engine(settings.database_url)
            db.upgrade(engine)
            sessions = db.session_factory(engine)
            prefix = f"api-{secrets.token_hex(3)}"
            with sessions.begin() as s:
                host = db.create_token(s, "bench host", ["host"]).token
                viewer = db.create_token(s, "bench viewer", ["viewer", "operator"]).token
            with RsiClient(settings, engine=engine) as lib:
                _record(lib, _turns(50, 5, prefix + "-warm-lib", template), clients)
                lib_lat, lib_s = _record(lib, _turns(n_turns, n_agents, prefix + "-lib", template), clients)
            _seed_runs(sessions, f"{prefix}-page", n_runs)
            versions = _two_versions(sessions, f"{prefix}-ev")
            with _service(settings, tmp) as url:
                with RsiHttpClient(url, host, backoff_s=0, listen=False, timeout_s=30) as http:
                    _record(http, _turns(50, 5, prefix + "-warm-http", template), clients)
                    http_lat, http_s = _record(
                        http, _turns(n_turns, n_agents, prefix + "-http", template), clients
                    )
                page = _render(url, viewer, f"{prefix}-page")
                events = _events(url, host, viewer, f"{prefix}-ev", versions)
            engine.dispose()
        finally:
            redis.stop()
    lib_stats, http_stats = stats_ms(lib_lat), stats_ms(http_lat)
    ratio = round(http_stats["p99_ms"] / lib_stats["p99_ms"], 2) if lib_stats["p99_ms"] else None
    report: dict[str, Any] = {
        "turns": n_turns,
        "clients": clients,
        "agents": n_agents,
        "backend": "sqlite",
        "in_process": {**lib_stats, "turns_per_s": round(n_turns / lib_s, 1)},
        "http": {**http_stats, "turns_per_s": round(n_turns / http_s, 1)},
        "p99_ratio": ratio,
        "console": {"runs": n_runs, **page},
        "harness_events": events,
    }
    report["summary"] = [
        ("in-process record_turn p50 / p99 (ms)", f"{lib_stats['p50_ms']} / {lib_stats['p99_ms']}", ""),
        ("HTTP record_turn p50 / p99 (ms)", f"{http_stats['p50_ms']} / {http_stats['p99_ms']}", ""),
        ("HTTP p99 / in-process p99", ratio, f"≤ {P99_RATIO_TARGET}"),
        (
            "throughput in-process / HTTP (turns/s)",
            f"{report['in_process']['turns_per_s']} / {report['http']['turns_per_s']}",
            "",
        ),
        (
            f"console agent page, {n_runs} runs: server render p50 / max (ms)",
            f"{page['render_p50_ms']} / {page['render_max_ms']}",
            f"< {RENDER_TARGET_MS:.0f}",
        ),
        ("console agent page: whole request p50 (ms)", page["request_p50_ms"], ""),
        (
            "harness event to a remote client p50 / p99 (ms)",
            f"{events.get('event_p50_ms')} / {events.get('event_p99_ms')}",
            f"< {EVENT_TARGET_MS:.0f}",
        ),
    ]
    return report


def _two_versions(sessions: Any, agent: str) -> list[str]:
    from rsi_common.harness import build_harness, h0

    out = []
    with sessions.begin() as s:
        db.ensure_agent(s, agent)
        db.lock_agent(s, agent)
        for tag in ("a", "b"):
            manifest = h0().manifest.to_json(include_parent=False)
            manifest["description"] = f"bench {tag}"
            harness = build_harness(manifest, h0().files)
            db.add_harness(s, agent, harness.version, harness.payload())
            out.append(harness.version)
    return out
