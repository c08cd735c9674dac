"""``rsi bench consolidate --timeline``: one in-process consolidation's model calls, members and
steps on a clock, against its critical path (docs/performance/consolidation.md#rsi-bench-consolidate).

The benchmark's run (:mod:`rsi_worker.bench.consolidate`: W = 8, k = 2, m = 2, sim latency
``latency_ms``) in this process (``consolidate_inline`` + ``ThreadExecutor(threads)``) on a private
redis-server and SQLite file. Recorded with ``time.perf_counter`` (seconds after the run's start):

* every model call: its role, start and end, and the member it ran in (a trial's candidate, world
  and trial; a draft's variant; ``""`` inside a step);
* every member (``flow.run_member``): start, end, the CPU its thread used (``time.thread_time``),
  the time a second-wave trial waited for its first wave (``waves.await_first_wave``);
* every step (``open``, ``after_incumbent``, ``judge_round``, the final write).

:func:`attribute` splits the wall into the critical path's segments and what each phase spent
beyond its model calls (the analysis of the page's table). Diagnosis only: the figures move with the
machine's load; the decisions are those of an uninstrumented run.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rsi_worker.consolidate import ModelFactory

__all__ = ["Recorder", "attribute", "bench_timeline", "phase_spans"]


@dataclass
class Recorder:
    """Thread-safe event list; ``label`` is the member a thread is running (thread-local)."""

    t0: float = field(default_factory=time.perf_counter)
    events: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    local: threading.local = field(default_factory=threading.local)

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def add(self, **event: Any) -> None:
        with self.lock:
            self.events.append(event)

    def label(self) -> str:
        return str(getattr(self.local, "label", ""))


class _TimedClient:
    """A model client that records each ``complete`` call's role, span and member label."""

    def __init__(self, inner: Any, role: str, rec: Recorder) -> None:
        self.inner, self.role, self.rec = inner, role, rec
        self.provider, self.model = inner.provider, inner.model

    def complete(self, request: Any) -> Any:
        t0 = self.rec.now()
        try:
            return self.inner.complete(request)
        finally:
            self.rec.add(kind="call", role=self.role, label=self.rec.label(), t0=t0, t1=self.rec.now(),
                         thread=threading.get_ident())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def timed_models(factory: Callable[[str, str, str], Any], rec: Recorder) -> Callable[[str, str, str], Any]:
    """``factory`` with every client it builds recorded (:class:`_TimedClient`)."""
    def build(provider: str, model: str, role: str) -> Any:
        return _TimedClient(factory(provider, model, role), role, rec)
    return build


def _member_label(members: str, item: Any) -> str:
    if members == "drafts":
        return f"draft {item}"
    return f"{item.candidate} {item.world_id[-6:]}#{item.trial}"


@contextlib.contextmanager
def _instrumented(rec: Recorder) -> Iterator[None]:
    """Wrap the flow's entry points where the inline driver looks them up."""
    from rsi_worker.bench.consol_counts import _patched
    from rsi_worker.consolidate import flow, trials

    def member(fn: Any) -> Any:
        def inner(deps: Any, members: str, run_id: str, item: Any) -> Any:
            label = _member_label(members, item)
            rec.local.label, t0, c0 = label, rec.now(), time.thread_time()
            try:
                return fn(deps, members, run_id, item)
            finally:
                rec.local.label = ""
                rec.add(kind="member", members=members, label=label, t0=t0, t1=rec.now(),
                        cpu=time.thread_time() - c0, thread=threading.get_ident(),
                        candidate=item if members == "drafts" else item.candidate)
        return inner

    def step(name: Callable[..., str]) -> Callable[[Any], Any]:
        def wrap(fn: Any) -> Any:
            def inner(*args: Any, **kwargs: Any) -> Any:
                t0, c0 = rec.now(), time.thread_time()
                try:
                    return fn(*args, **kwargs)
                finally:
                    rec.add(kind="step", step=name(*args, **kwargs), t0=t0, t1=rec.now(),
                            cpu=time.thread_time() - c0)
            return inner
        return wrap

    def waves(fn: Any) -> Any:
        def inner(*args: Any, **kwargs: Any) -> Any:
            t0 = rec.now()
            try:
                return fn(*args, **kwargs)
            finally:
                rec.add(kind="wave_wait", label=rec.label(), t0=t0, t1=rec.now())
        return inner

    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(flow, "run_member", member))
        stack.enter_context(_patched(flow, "open_run", step(lambda *a, **k: "open")))
        stack.enter_context(_patched(flow, "run_step", step(lambda d, s, *a, **k: str(s))))
        stack.enter_context(_patched(flow, "close", step(lambda *a, **k: "close")))
        stack.enter_context(_patched(trials, "await_first_wave", waves))
        yield


def phase_spans(events: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    """The run's sequential phases from its step events: ``open``, ``incumbent`` (open's end →
    ``after_incumbent``'s start), ``after_incumbent``, ``candidates`` (→ ``judge_round``'s start),
    ``judge_round``, ``close``."""
    steps = {e["step"]: (e["t0"], e["t1"]) for e in events if e["kind"] == "step"}
    out: dict[str, tuple[float, float]] = {}
    if "open" in steps:
        out["open"] = steps["open"]
    if "open" in steps and "after_incumbent" in steps:
        out["incumbent"] = (steps["open"][1], steps["after_incumbent"][0])
        out["after_incumbent"] = steps["after_incumbent"]
    if "after_incumbent" in steps and "judge_round" in steps:
        out["candidates"] = (steps["after_incumbent"][1], steps["judge_round"][0])
        out["judge_round"] = steps["judge_round"]
    if "close" in steps:
        out["close"] = steps["close"]
    return out


def _calls_in(events: Sequence[Mapping[str, Any]], span: tuple[float, float], *,
              role: str | None = None) -> list[Mapping[str, Any]]:
    return [e for e in events if e["kind"] == "call" and span[0] <= e["t0"] < span[1]
            and (role is None or e["role"] == role)]


def _busy(spans: Sequence[tuple[float, float]]) -> float:
    """Length of the union of ``spans``."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def attribute(events: Sequence[Mapping[str, Any]], cp_segments: Mapping[str, int], latency_ms: float,
              threads: int) -> dict[str, Any]:
    """Where the wall went, phase by phase, against the critical path's ``cp_segments`` (calls).

    Per phase: its wall, its CP share, and the excess. In the candidates phase, the critical chain
    (the candidate whose last trial ended last) is followed: its draft (calls and the rest), the wait
    of its trials for a thread (draft end → member start), their wave waits, the time between
    their model calls (member span − calls − wave wait: CPU and I/O of the member), and the tail
    (last trial end → ``judge_round``). Seconds throughout.
    """
    lat = latency_ms / 1000.0
    phases = phase_spans(events)
    cp_of = {"open": cp_segments.get("signal", 0), "incumbent": cp_segments.get("incumbent_trial", 0),
             "after_incumbent": cp_segments.get("analyst", 0),
             "candidates": cp_segments.get("draft", 0) + cp_segments.get("candidate_trial", 0),
             "judge_round": 0, "close": 0}
    rows = []
    for name, (a, b) in phases.items():
        calls = _calls_in(events, (a, b))
        rows.append({"phase": name, "wall_s": round(b - a, 3), "cp_s": round(cp_of[name] * lat, 3),
                     "excess_s": round(b - a - cp_of[name] * lat, 3), "calls": len(calls),
                     "calls_busy_s": round(_busy([(c["t0"], c["t1"]) for c in calls]), 3)})
    members = [e for e in events if e["kind"] == "member"]
    waits = {e["label"]: e["t1"] - e["t0"] for e in events if e["kind"] == "wave_wait"}
    ends = [t for span in phases.values() for t in span]
    out: dict[str, Any] = {"phases": rows, "wall_s": round(max(ends) - min(ends), 3) if ends else 0.0}
    if "candidates" in phases:
        out["candidates"] = _candidates(events, members, waits, phases["candidates"], lat, threads)
    for kind in ("trials", "drafts"):
        mine = [m for m in members if m["members"] == kind]
        if mine:
            out[f"{kind}_cpu_ms_mean"] = round(1000 * sum(m["cpu"] for m in mine) / len(mine), 2)
    return out


def _candidates(events: Sequence[Mapping[str, Any]], members: Sequence[Mapping[str, Any]],
                waits: Mapping[str, float], span: tuple[float, float], lat: float,
                threads: int) -> dict[str, Any]:
    a0, b0 = span
    per: dict[str, Any] = {}
    drafts = {m["candidate"]: m for m in members if m["members"] == "drafts" and a0 <= m["t0"] < b0}
    for cand, d in drafts.items():
        trials = [m for m in members
                  if m["members"] == "trials" and m["candidate"] == cand and a0 <= m["t0"] < b0]
        if not trials:
            per[cand] = {"draft_s": round(d["t1"] - d["t0"], 3)}
            continue
        calls = {m["label"]: [c for c in events if c["kind"] == "call" and c["label"] == m["label"]]
                 for m in trials}
        last = max(trials, key=lambda m: m["t1"])
        first_start = min(m["t0"] for m in trials)
        gaps = []
        for m in trials:
            inside = sum(c["t1"] - c["t0"] for c in calls[m["label"]])
            gaps.append(m["t1"] - m["t0"] - inside - waits.get(m["label"], 0.0))
        d_calls = [c for c in events if c["kind"] == "call" and c["label"] == d["label"]]
        per[cand] = {
            "draft_start_s": round(d["t0"] - a0, 3),
            "draft_s": round(d["t1"] - d["t0"], 3),
            "draft_calls": len(d_calls),
            "draft_beyond_calls_s": round(d["t1"] - d["t0"] - sum(c["t1"] - c["t0"] for c in d_calls), 3),
            "trials": len(trials),
            "first_trial_start_after_draft_s": round(first_start - d["t1"], 3),
            "last_trial_start_after_draft_s": round(max(m["t0"] for m in trials) - d["t1"], 3),
            "last_trial_end_s": round(last["t1"] - a0, 3),
            "wave_wait_s_max": round(max((waits.get(m["label"], 0.0) for m in trials), default=0.0), 3),
            "wave_waiting_trials": sum(1 for m in trials if waits.get(m["label"], 0.0) > lat / 4),
            "trial_beyond_calls_s_mean": round(sum(gaps) / len(gaps), 3),
            "trial_beyond_calls_s_max": round(max(gaps), 3),
            "trial_calls": sum(len(v) for v in calls.values()),
        }
    trial_members = [m for m in members if m["members"] == "trials" and a0 <= m["t0"] < b0]
    out: dict[str, Any] = {"per_candidate": per, "threads": threads}
    if trial_members:
        out["tail_s"] = round(b0 - max(m["t1"] for m in trial_members), 3)
        # threads busy over time: the most members running at once
        edges = sorted([(m["t0"], 1) for m in members if a0 <= m["t0"] < b0]
                       + [(m["t1"], -1) for m in members if a0 <= m["t0"] < b0])
        peak = run = 0
        for _, delta in edges:
            run += delta
            peak = max(peak, run)
        out["peak_members_running"] = peak
    return out


def bench_timeline(*, threads: int = 16, latency_ms: float = 200.0, home: Path | None = None,
                   wave_s: float | None = None, warm: bool = False) -> dict[str, Any]:
    """Seed the benchmark's agent, run one consolidation in this process with the timeline recorded,
    and attribute its wall (:func:`attribute`). ``wave_s``: ``early_stop_wave_s`` (``None``: the
    default; 0 turns waves off). ``warm``: first run the same consolidation, unrecorded, for another
    agent on the same runtime (a worker's steady state: statements compiled, memos filled).

    Returns:
        ``{run, threads, latency_ms, critical_path, attribution, events}`` (events: seconds after the
        recorder's start).
    """
    from rsi_common.config import Settings
    from rsi_common.db import get_run, replay_rows
    from rsi_worker.bench.consolidate import FACTORY, _latest_io, critical_path, seed_agent
    from rsi_worker.bench.models import bench_models
    from rsi_worker.consolidate import ThreadExecutor, consolidate_inline
    from rsi_worker.consolidate.trials import row_json
    from rsi_worker.local.servers import RedisServer
    from rsi_worker.runtime import open_runtime

    with contextlib.ExitStack() as stack:
        home = home or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rsi-timeline-")))
        server = RedisServer(home / "redis", unix_socket=True).start()
        stack.callback(server.stop)
        base = Settings(home=home, database_url=f"sqlite:///{home / 'rsi.db'}", redis_url=server.url)
        update: dict[str, Any] = {"sim": base.sim.model_copy(update={"latency_ms": latency_ms}),
                                  "model_factory": FACTORY, "model_backoff_s": 0.0}
        if wave_s is not None:
            update["consolidation"] = base.consolidation.model_copy(update={"early_stop_wave_s": wave_s})
        settings = base.model_copy(update=update)
        rec = Recorder()
        models = cast("ModelFactory", timed_models(bench_models(settings), rec))
        rt = open_runtime(settings, migrate=True, models=models)
        stack.callback(rt.close)
        if warm:
            seed_agent(rt.sessions, rt.settings, "warm")
            first = rt.coord.try_begin("warm", _latest_io(rt, "warm"))
            if first is None:
                raise RuntimeError("the lease of the warm-up agent is held")
            consolidate_inline(rt.deps, first, ThreadExecutor(threads))
        seed_agent(rt.sessions, rt.settings, "timed")
        lease = rt.coord.try_begin("timed", _latest_io(rt, "timed"))
        if lease is None:
            raise RuntimeError("the lease of the timed agent is held")
        with _instrumented(rec):
            rec.t0 = time.perf_counter()
            results = consolidate_inline(rt.deps, lease, ThreadExecutor(threads))
        if not results or results[0].run_id is None:
            raise RuntimeError("the timed run produced no result")
        with rt.sessions() as s:
            run = get_run(s, results[0].run_id)
            params, drafts = dict(run.params or {}), dict(run.drafts or {})
            rows = [row_json(r) for r in replay_rows(s, run.id)]
            status, rnd = run.status, dict((run.result or {}).get("round") or {})
            s.commit()
    cp = critical_path(params, rows, drafts, latency_ms, threads)
    events = sorted(rec.events, key=lambda e: e["t0"])
    return {"run": {"status": status, "winner": rnd.get("winner"), "trials": len(rows)},
            "threads": threads, "warm": warm, "latency_ms": latency_ms, "critical_path": cp,
            "attribution": attribute(events, cp["segments_calls"], latency_ms, threads),
            "events": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in e.items()
                        if k != "thread"} for e in events]}
