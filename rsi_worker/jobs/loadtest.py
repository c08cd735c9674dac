"""``rsi loadtest``: drive recorded turns through a real cluster at a fixed arrival rate (issue 8).

**Traffic.** ``rate × duration`` turns are offered, turn ``i`` at ``i / rate`` seconds after the start,
to agent ``i mod agents`` (agents ``<prefix>-0 … <prefix>-{agents-1}``). Each agent walks through
conversations of the pool (:mod:`rsi_worker.jobs.loadpool`) — agent ``a``'s ``m``-th conversation is pool
conversation ``(a + m·agents) mod |pool|`` — turn after turn, so a correction arrives as the next
turn of the conversation it corrects and triggers a round. Every turn is a pool world rebound to its
agent, a fresh conversation id, a fresh io id and the current clock, recorded through
:meth:`RsiClient.record_turn` (SQL first, then the lease and the ``consolidate`` message — the real
host path). Sender threads own disjoint sets of agents, so one agent's turns are recorded in order.

**Drain.** After the last offer, the run waits (up to ``drain_timeout_s``) until every agent's last
turn is *covered*: a closed run of the agent whose io is that turn, or that started after it was
recorded (a run loads the newest worlds when it starts), and no run of the agent is still running.

**Report.** Turns offered / recorded / failed and how they were handed off; throughput; send lag and
``record_turn`` latency; queue wait (``consolidate`` message of a turn that took the lease: the world
row's ``created_at`` → run ``started_at``) and re-run wait (a pending turn: ``created_at`` → its re-run's
``started_at``); turn → judge latency (``created_at`` → ``finished_at`` of the first run covering it);
runs by status;
redeliveries (``rsi:task:*:deliveries`` counters that passed 1 during the test); lease contention
(``record_turn`` answered ``pending``); lost turns: recorded worlds missing from SQL (only the latest
``world_retention`` per agent are expected to be kept) and agents whose last turn no run covered.

Clocks: the latencies use the database clock only (world ``created_at``, run ``started_at`` /
``finished_at``); send lag and ``record_turn`` latency use this host's clock.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from rsi_common.client import RsiClient, RunInfo
from rsi_common.errors import InvalidInput
from rsi_worker.jobs.loadpool import PoolConversation, PoolTurn, rebind

__all__ = ["LoadConfig", "Offer", "Sent", "drive", "run_loadtest", "schedule"]

CLOSED = ("recorded", "kept", "adopted", "failed", "skipped", "interrupted")


@dataclass(frozen=True)
class LoadConfig:
    """What to offer: ``rate`` turns/s for ``duration_s`` seconds over ``agents`` agents."""

    rate: float = 5.0
    duration_s: float = 20.0
    agents: int = 10
    prefix: str = ""
    """Agent id prefix (default ``load-<random hex>``: fresh agents for every run)."""
    senders: int = 8
    drain_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if not (self.rate > 0 and self.duration_s > 0 and self.agents >= 1 and self.senders >= 1):
            raise InvalidInput("rate and duration must be > 0, agents and senders ≥ 1")


@dataclass(frozen=True)
class Offer:
    """Turn ``index`` of the load: when (seconds after the start), to whom, which pool turn."""

    index: int
    at_s: float
    agent_id: str
    interaction_id: str
    turn: PoolTurn


@dataclass
class Sent:
    """What happened to one offer."""

    offer: Offer
    io_id: str
    sent_at: float = 0.0
    recorded_at: float = 0.0
    dispatched: str = ""
    world_id: str | None = None
    error: str | None = None


def schedule(pool: Sequence[PoolConversation], cfg: LoadConfig, prefix: str) -> list[Offer]:
    """The offers of the load, in time order (module docstring)."""
    if not pool:
        raise InvalidInput("the world pool is empty")
    n = max(1, round(cfg.rate * cfg.duration_s))
    cursor: dict[int, tuple[int, int]] = {}  # agent → (conversation number m, next turn index)
    offers = []
    for i in range(n):
        a = i % cfg.agents
        m, t = cursor.get(a, (0, 0))
        conv = pool[(a + m * cfg.agents) % len(pool)]
        offers.append(Offer(i, i / cfg.rate, f"{prefix}-{a}", f"{prefix}-{a}-c{m}", conv.turns[t]))
        cursor[a] = (m + 1, 0) if t + 1 >= len(conv.turns) else (m, t + 1)
    return offers


def _send(client: RsiClient, offers: Sequence[Offer], start: float, nonce: str, out: list[Sent],
          lock: threading.Lock) -> None:
    for offer in offers:
        delay = start + offer.at_s - time.time()
        if delay > 0:
            time.sleep(delay)
        sent = Sent(offer, io_id=f"io-{nonce}-{offer.index}", sent_at=time.time())
        world = rebind(offer.turn, agent_id=offer.agent_id, interaction_id=offer.interaction_id,
                       io_id=sent.io_id, clock=sent.sent_at)
        try:
            rec = client.record_turn(offer.agent_id, {"world": world, "signals": dict(offer.turn.signals)})
            sent.dispatched, sent.world_id = rec.dispatched, rec.world_id
        except Exception as exc:  # reported per turn; the load goes on
            sent.error = f"{type(exc).__name__}: {exc}"[:300]
        sent.recorded_at = time.time()
        with lock:
            out.append(sent)


def drive(client: RsiClient, offers: Sequence[Offer], senders: int) -> tuple[list[Sent], float, float]:
    """Record every offer at its time; returns ``(sent, start, end)`` (epoch seconds)."""
    agents = sorted({o.agent_id for o in offers})
    owner = {a: i % senders for i, a in enumerate(agents)}
    shares: list[list[Offer]] = [[] for _ in range(min(senders, len(agents)))]
    for o in offers:
        shares[owner[o.agent_id]].append(o)
    out: list[Sent] = []
    lock = threading.Lock()
    nonce = secrets.token_hex(4)
    start = time.time() + 0.2
    threads = [threading.Thread(target=_send, args=(client, share, start, nonce, out, lock), daemon=True,
                                name=f"rsi-load-{i}") for i, share in enumerate(shares)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sorted(out, key=lambda s: s.offer.index), start, time.time()


# --- draining and reading back -------------------------------------------------------------------


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _covering(runs: Sequence[RunInfo], sent: Sent, recorded: float | None = None) -> RunInfo | None:
    """The first closed run that covers ``sent`` (module docstring), by finish time.

    ``recorded``: when the turn's world was stored (database clock); default: when ``record_turn``
    returned (this host's clock, a little later).
    """
    at = sent.recorded_at if recorded is None else recorded
    closed = [r for r in runs if r.status in CLOSED and r.finished_at is not None]
    hits = [r for r in closed if r.io_id == sent.io_id or (_ts(r.started_at) or 0.0) >= at]
    return min(hits, key=lambda r: _ts(r.finished_at) or 0.0, default=None)


def _agent_runs(client: RsiClient, agents: Sequence[str]) -> dict[str, list[RunInfo]]:
    limit = client.settings.run_retention
    out: dict[str, list[RunInfo]] = {}
    for a in agents:
        try:
            out[a] = client.runs(a, limit=limit)
        except Exception:  # an agent none of whose turns was stored
            out[a] = []
    return out


def _last_turns(sent: Sequence[Sent]) -> dict[str, Sent]:
    last: dict[str, Sent] = {}
    for s in sent:
        if s.error is None:
            last[s.offer.agent_id] = s
    return last


def drain(client: RsiClient, sent: Sequence[Sent], timeout_s: float) -> tuple[bool, float]:
    """Wait until every agent's last turn is covered and none of its runs is running."""
    last = _last_turns(sent)
    t0 = time.monotonic()
    while True:
        runs = _agent_runs(client, sorted(last))
        pending = [a for a, s in last.items()
                   if _covering(runs[a], s) is None or any(r.status == "running" for r in runs[a])]
        if not pending:
            return True, time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            return False, time.monotonic() - t0
        time.sleep(0.25)


def delivery_counts(client: RsiClient) -> dict[str, int]:
    """The ``rsi:task:<id>:deliveries`` counters in the coordination Redis."""
    out: dict[str, int] = {}
    for key in client.redis.scan_iter(match="rsi:task:*:deliveries", count=1000):
        value = client.redis.get(key)
        name = key.decode() if isinstance(key, bytes) else str(key)
        out[name] = int(value or 0)
    return out


# --- the report ----------------------------------------------------------------------------------


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def stats_ms(values_s: Sequence[float]) -> dict[str, Any]:
    """``{n, p50_ms, p99_ms, max_ms}`` of durations given in seconds."""
    if not values_s:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ms = [v * 1000 for v in values_s]
    return {"n": len(ms), "p50_ms": round(_pct(ms, 0.5), 1), "p99_ms": round(_pct(ms, 0.99), 1),
            "max_ms": round(max(ms), 1)}


def stored_worlds(client: RsiClient, world_ids: Sequence[str]) -> dict[str, float]:
    """World id → ``created_at`` (database clock, epoch seconds) of the worlds still stored."""
    from rsi_common.db import WorldRow, session_factory

    out: dict[str, float] = {}
    with session_factory(client.engine)() as session:
        for i in range(0, len(world_ids), 500):
            chunk = list(world_ids[i:i + 500])
            rows = session.execute(sa.select(WorldRow.id, WorldRow.created_at).where(WorldRow.id.in_(chunk)))
            out.update((wid, created.timestamp()) for wid, created in rows)
        session.commit()
    return out


def _latencies(sent: Sequence[Sent], runs: Mapping[str, Sequence[RunInfo]],
               stored: Mapping[str, float]) -> dict[str, Any]:
    """Queue wait, re-run wait and turn → judge latency: from the world's ``created_at`` to the run's
    ``started_at`` / ``finished_at`` (all database clock)."""
    by_io = {r.io_id: r for rs in runs.values() for r in rs if r.io_id}
    queue: list[float] = []
    rerun: list[float] = []
    judged: list[float] = []
    for s in sent:
        recorded = stored.get(s.world_id or "")
        if s.error is not None or recorded is None:
            continue
        own = by_io.get(s.io_id)
        if own is not None and s.dispatched in ("enqueued", "pending"):
            wait = own.started_at.timestamp() - recorded
            (queue if s.dispatched == "enqueued" else rerun).append(wait)
        cover = _covering(runs.get(s.offer.agent_id, []), s, recorded)
        if cover is not None and cover.finished_at is not None:
            judged.append(cover.finished_at.timestamp() - recorded)
    return {"queue_wait": stats_ms(queue), "rerun_wait": stats_ms(rerun), "turn_to_judge": stats_ms(judged)}


def _lost(client: RsiClient, sent: Sequence[Sent], runs: Mapping[str, Sequence[RunInfo]],
          stored: Mapping[str, float]) -> dict[str, Any]:
    """Recorded worlds missing from SQL and agents whose last turn no run covered."""
    keep = client.settings.world_retention
    expected: list[Sent] = []
    per_agent: dict[str, list[Sent]] = {}
    for s in sent:
        if s.error is None and s.world_id is not None:
            per_agent.setdefault(s.offer.agent_id, []).append(s)
    for mine in per_agent.values():
        expected.extend(mine[-keep:])
    missing = [s.io_id for s in expected if s.world_id not in stored]
    last = _last_turns(sent)
    uncovered = sorted(a for a, s in last.items()
                       if _covering(runs.get(a, []), s, stored.get(s.world_id or "")) is None)
    evicted = sum(len(v) for v in per_agent.values()) - len(expected)
    return {"worlds_expected": len(expected), "worlds_stored": len(expected) - len(missing),
            "worlds_missing": missing[:20], "evicted_by_retention": evicted,
            "agents_uncovered": uncovered,
            "lost_turns": len(missing) + len(uncovered)}


@dataclass
class LoadResult:
    """Everything measured; :meth:`report` turns it into the JSON report."""

    cfg: LoadConfig
    pool: Mapping[str, Any]
    mode: str
    sent: list[Sent]
    start: float
    end: float
    drained: bool = False
    drain_s: float = 0.0
    runs: dict[str, list[RunInfo]] = field(default_factory=dict)
    deliveries_before: dict[str, int] = field(default_factory=dict)
    deliveries_after: dict[str, int] = field(default_factory=dict)

    def report(self, client: RsiClient) -> dict[str, Any]:
        ok = [s for s in self.sent if s.error is None]
        span = max(1e-9, max((s.recorded_at for s in ok), default=self.start) - self.start)
        statuses = Counter(r.status for rs in self.runs.values() for r in rs)
        redelivered = {k: v for k, v in self.deliveries_after.items()
                       if v > 1 and self.deliveries_before.get(k, 0) <= 1}
        stored = stored_worlds(client, [s.world_id for s in ok if s.world_id])
        lost = _lost(client, self.sent, self.runs, stored)
        return {
            "config": {"rate": self.cfg.rate, "duration_s": self.cfg.duration_s, "agents": self.cfg.agents,
                       "senders": self.cfg.senders, "mode": self.mode, "pool": dict(self.pool)},
            "turns": {"offered": len(self.sent), "recorded": len(ok), "failed": len(self.sent) - len(ok),
                      "errors": dict(Counter((s.error or "").split(":")[0] for s in self.sent if s.error)),
                      "dispatched": dict(Counter(s.dispatched for s in ok)),
                      "by_kind": dict(Counter(s.offer.turn.kind for s in ok))},
            "throughput_turns_per_s": round(len(ok) / span, 3),
            "send_lag": stats_ms([max(0.0, s.sent_at - self.start - s.offer.at_s) for s in self.sent]),
            "record_turn": stats_ms([s.recorded_at - s.sent_at for s in self.sent]),
            **_latencies(self.sent, self.runs, stored),
            "runs": {"total": sum(statuses.values()), "by_status": dict(sorted(statuses.items()))},
            "redeliveries": {"tasks": len(redelivered),
                             "extra_deliveries": sum(v - 1 for v in redelivered.values())},
            "lease_contention": sum(1 for s in ok if s.dispatched == "pending"),
            "lost": lost,
            "drained": self.drained,
            "drain_s": round(self.drain_s, 3),
            "seconds": round(time.time() - self.start, 3),
            "ok": self.drained and lost["lost_turns"] == 0 and len(ok) == len(self.sent),
        }


def run_loadtest(client: RsiClient, pool: Sequence[PoolConversation], cfg: LoadConfig, *,
                 mode: str, pool_info: Mapping[str, Any]) -> dict[str, Any]:
    """Offer the load through ``client``, drain, and return the report (module docstring)."""
    prefix = cfg.prefix or f"load-{secrets.token_hex(3)}"
    offers = schedule(pool, cfg, prefix)
    before = delivery_counts(client)
    sent, start, end = drive(client, offers, cfg.senders)
    result = LoadResult(cfg, pool_info, mode, sent, start, end, deliveries_before=before)
    result.drained, result.drain_s = drain(client, sent, cfg.drain_timeout_s)
    result.runs = _agent_runs(client, sorted({o.agent_id for o in offers}))
    result.deliveries_after = delivery_counts(client)
    report = result.report(client)
    report["config"]["prefix"] = prefix
    return report
