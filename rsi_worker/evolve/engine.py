"""The offline evolve loop in one process (``rsi evolve run --inline``; docs/algorithm/evolve.md#the-loop).

1. **Baseline** (``t = −1``): H0 evaluated ``base_evals`` = R times on the evolve split (candidates
   ``base0``, ``base1``, …; repeat r uses trial seeds ``r·k + j`` so the repeats differ), history rows
   with outcome ``BASELINE``; δ = ``params.delta`` if set, else ``calibrate(base evaluations)`` once;
   S★ = S_0 = the first base evaluation's Ŝ (its trial seeds are the candidates' seeds: paired); H0 on
   the held-out split for reporting.
2. **Rounds** t = 0..T−1: views of the incumbent's trials (the worst trial of the ``n_fail_traces``
   lowest-scoring tasks, the best of the ``n_success_traces`` highest), the analyst's report, m drafts by
   the proposer and critic (the consolidation roles, ``draft_candidate``), smoke (``smoke_n`` tasks at
   k = 1, no missing trial), each live candidate evaluated on the whole evolve split (early stop in
   production), Algorithm 2, the new state. A winner is measured on the held-out split for reporting,
   beside the next round (``heldout_pending`` until then; the run's end measures what is still owed).
   Each variant goes from its draft to its smoke and evaluation at once (``eval_parallel`` at a time).
3. The run ends after T rounds, or after the current round when ``rsi evolve stop`` or a ``STOP`` file
   asked, or after 3 rounds in a row whose every candidate failed on infrastructure (smoke or
   ``eval_invalid``).

Every step stores its result before the next starts (drafts, trials, the judgement with the new state
in one transaction), so a killed run resumes from its last stored trial with the same decisions.
Held-out tasks are never in any role's input: views, drafts and critic patterns are built from the
evolve split only.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from rsi_common.config import Settings
from rsi_common.harness import Harness, h0, materialize
from rsi_common.kernel import RetryPolicy
from rsi_common.kinds import in_kind_order
from rsi_common.math import (
    Candidate,
    Edit,
    EditRecord,
    EvalResult,
    accepted_counts,
    can_stop_exactly,
    edit_budget,
    exploration,
    exploration_directive,
    prune_set,
    reserved_variants,
    stall_flag,
    tried,
)
from rsi_common.math.calibrate import calibrate
from rsi_common.world import TurnWorld
from rsi_worker.consolidate.context import CountingClient, ModelFactory, load_worlds
from rsi_worker.consolidate.draft import DraftContext, draft_candidate, round_gate
from rsi_worker.consolidate.evaluate import StopContext, assemble
from rsi_worker.consolidate.incumbent import FAIL_BELOW
from rsi_worker.evolve.config import EvolveConfig
from rsi_worker.evolve.evaluation import EvalJob, bounds, evaluate
from rsi_worker.evolve.judgement import apply_judgement, decision_record, judge, plain
from rsi_worker.evolve.memo import MEMO, suite_key
from rsi_worker.evolve.slots import SMOKE, SlotPool
from rsi_worker.evolve.store import Store
from rsi_worker.evolve.suite import Suite
from rsi_worker.evolve.trials import TrialEnv, request_world, run_task
from rsi_worker.evolve.writer import RoundWriter
from rsi_worker.roles.analyst import View
from rsi_worker.roles.digester import digest, report

__all__ = [
    "INFRA_STREAK",
    "EvolveEnv",
    "Pending",
    "RunOutcome",
    "run_inline",
    "run_step",
    "run_trial_spec",
    "status_of",
    "with_heldout",
]

INFRA_STREAK = 3
"""Rounds in a row whose every candidate failed on infrastructure before the run stops."""
HELDOUT = "heldout"
_COUNT_LOCK = threading.Lock()
T = TypeVar("T")
R = TypeVar("R")


@dataclass
class EvolveEnv:
    """What a run needs from outside: the database, the model factory, settings (retries), where a
    ``STOP`` file is looked for, and a usage tally (role → calls/tokens)."""

    sessions: sessionmaker[Session]
    models: ModelFactory
    settings: Settings = field(default_factory=Settings)
    stop_file: Path | None = None
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    phases: list[tuple[int, str, float]] = field(default_factory=list)
    """``(t, phase, seconds)`` of the phases this process ran (``rsi bench evolve``; never stored)."""

    def phase(self, t: int, name: str, seconds: float) -> None:
        with _COUNT_LOCK:
            self.phases.append((t, name, seconds))

    @property
    def store(self) -> Store:
        return Store(self.sessions)

    def client(self, config: EvolveConfig, role: str) -> CountingClient:
        return CountingClient(self.models(config.provider, config.model, role))

    def count(self, role: str, client: CountingClient) -> None:
        with _COUNT_LOCK:
            self._count(role, client)

    def _count(self, role: str, client: CountingClient) -> None:
        tally = self.usage.setdefault(role, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        for key, value in client.usage().items():
            tally[key] = tally.get(key, 0) + value


@dataclass(frozen=True)
class RunOutcome:
    """Where a ``run`` call left the run (``pending``: on the cluster, trials to fan out first)."""

    status: str
    t: int
    rounds_run: int
    reason: str = ""
    pending: list[dict[str, Any]] = field(default_factory=list)


class Pending(Exception):
    """Trials the cluster must run before this step can go on (their specs)."""

    def __init__(self, specs: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(specs)} trials pending")
        self.specs = specs


class _Run:
    """One loaded run: suite, config, worlds, trial environment."""

    def __init__(self, env: EvolveEnv, name: str) -> None:
        self.env, self.name, self.store = env, name, env.store
        suite_name, self.config, self.status, self.stop_requested, state = self.store.run(name)
        # the suite, its checks and worlds: validated once per process and suite version (memo.py)
        static = MEMO.static(env.sessions, name, suite_key(self.store.suite_spec(suite_name)))
        self.suite_key = static.suite_key
        self.suite: Suite = static.suite
        self.state = state
        self.checks = static.checks
        self.evolve_ids = static.evolve_ids
        self.heldout_ids = static.heldout_ids
        self.worlds: Mapping[str, TurnWorld] = static.worlds
        world_ids = [t.world_id for t in self.suite.tasks if t.world_id is not None]
        if world_ids:  # a step sees a world deleted since (the run fails); the memo's copy serves trials
            with env.sessions() as s:
                self.worlds = load_worlds(s, world_ids, self.suite.agent)
        self.retry = RetryPolicy.from_settings(env.settings)
        self.deferred: list[dict[str, Any]] | None = None
        """``None`` in one process; on the cluster, the trial specs deferred by this step."""
        self.send: Callable[[list[dict[str, Any]]], None] | None = None
        """On the cluster: called with each evaluation's deferred specs as soon as they are known (the
        step sends them at once, beside its other work); every one of them is also in ``deferred``."""
        self.pool: SlotPool | None = None
        """The trial slots shared by the baseline's or the round's evaluations (:meth:`slots`)."""

    def slots(self) -> SlotPool:
        """A fresh pool of ``eval_parallel × trial_parallel`` trial slots, set as ``self.pool``."""
        self.pool = SlotPool(max(1, self.config.eval_parallel * self.config.trial_parallel))
        return self.pool

    # --- evaluations ----------------------------------------------------------------------------

    def trial_env(self, role_usage: dict[str, CountingClient]) -> TrialEnv:
        def role(r: str) -> Any:
            if r not in role_usage:
                role_usage[r] = self.env.client(self.config, r)
            return role_usage[r]

        return TrialEnv(self.suite, role, self.config.provider, self.config.model, self.worlds, self.retry)

    def evaluate(
        self,
        t: int,
        candidate: str,
        harness: Harness,
        task_ids: Sequence[str],
        k: int,
        *,
        seed_base: int = 0,
        stop: StopContext | None = None,
        ref: tuple[int, str] | None = None,
    ) -> list[dict[str, Any]] | None:
        """The evaluation's rows, or ``None`` on the cluster when trials were deferred (``self.deferred``
        gets their specs; ``ref`` names the harness there: ``None`` = H0, ``(t, variant)`` = a draft)."""
        clients: dict[str, CountingClient] = {}
        deferred = self.deferred

        def defer(slots: list[tuple[str, int, int]]) -> None:
            assert deferred is not None
            split = "heldout" if candidate == HELDOUT else "evolve"
            specs = [
                {
                    "t": t,
                    "candidate": candidate,
                    "task": task,
                    "trial": j,
                    "attempt": a,
                    "seed": seed_base + j,
                    "k": k,
                    "split": split,
                    "seed_base": seed_base,
                    "harness": list(ref) if ref else None,
                    "suite_key": self.suite_key,
                    "stop": None if stop is None else [stop.S_star, stop.delta, stop.S_t],
                }
                for task, j, a in slots
            ]
            deferred.extend(specs)
            if self.send is not None:
                self.send(specs)

        tenv = self.trial_env(clients)
        job = EvalJob(self.name, t, candidate, tuple(task_ids), self.checks, k, self.config.seed, seed_base)
        rows = evaluate(
            self.store,
            job,
            lambda task, seed: run_task(tenv, self.suite.task(task), harness, seed),
            parallel=self.config.trial_parallel,
            stop=stop,
            defer=defer if deferred is not None else None,
            pool=self.pool,
        )
        for r, c in clients.items():
            self.env.count(r, c)
        return rows

    def assembled(
        self, rows: Sequence[Mapping[str, Any]], task_ids: Sequence[str], k: int, job: str
    ) -> EvalResult:
        ev = assemble(list(task_ids), self.checks, rows, k, job).ev
        assert ev is not None
        return ev

    # --- baseline -------------------------------------------------------------------------------

    def baseline(self) -> None:
        p, k = self.config.params, self.config.params.k
        evals = []
        # the R base evaluations and the held-out one are independent: they run side by side
        jobs: list[Callable[[], Any]] = [
            functools.partial(self.evaluate, -1, f"base{r}", h0(), self.evolve_ids, k, seed_base=r * k)
            for r in range(self.config.base_evals)
        ]
        jobs.append(functools.partial(self._heldout, -1, h0(), None))
        with self.slots():  # their trials share the slots (each takes one as the last ends)
            *all_rows, held = _each(lambda job: job(), jobs, len(jobs))
        self.pool = None
        self.raise_pending()
        for r, rows in enumerate(all_rows):
            assert rows is not None
            evals.append(self.assembled(rows, self.evolve_ids, k, f"base{r}"))
        cal = calibrate(evals, z=p.delta_z)
        delta = float(p.delta) if p.delta is not None else cal.delta
        inc = evals[0]
        baseline_rows = [
            {
                "t": -1,
                "variant": f"base{r}",
                "edit_id": None,
                "component": None,
                "hypothesis": None,
                "delta_S": None,
                "delta_C": None,
                "accepted": False,
                "outcome": "BASELINE",
                "S": round(ev.S, 6),
                "C": None if ev.C is None else round(ev.C, 1),
                "bundle": 0,
                "detail": f"H0 base evaluation {r}",
            }
            for r, ev in enumerate(evals)
        ]
        state = {
            "t": 0,
            "delta": delta,
            "calibration": plain(cal.to_json()),
            "delta_source": "params.delta" if p.delta is not None else "calibrate",
            "S_star": inc.S,
            "S_t": inc.S,
            "incumbent": None,
            "inc_ev": plain(inc.to_json()),
            "inc_rows": {"t": -1, "candidate": "base0"},
            "trajectory": [inc.S],
            "records": [],
            "baseline": baseline_rows,
            "heldout": [{"t": -1, "version": "h0", "S": held}] if held is not None else [],
            "accepted": [],
            "infra_streak": 0,
            "usage": {},
        }
        self._save_state(
            state,
            -1,
            {
                "decision": {
                    "t": -1,
                    "baseline": [ev.to_json() for ev in evals],
                    "calibration": plain(cal.to_json()),
                    "delta": delta,
                }
            },
        )

    def _heldout(self, t: int, harness: Harness, ref: tuple[int, str] | None) -> float | None:
        if not self.heldout_ids:
            return None
        k = self.config.params.k
        rows = self.evaluate(t, HELDOUT, harness, self.heldout_ids, k, ref=ref)
        return None if rows is None else self.assembled(rows, self.heldout_ids, k, HELDOUT).S

    def pending_heldout(self, state: Mapping[str, Any]) -> float | None:
        """The held-out S of the adopted harness whose measurement ``state`` still owes
        (``heldout_pending``), or ``None`` (nothing owed, or its trials were deferred to the cluster)."""
        pending = state.get("heldout_pending")
        if not pending:
            return None
        t, variant = int(pending["t"]), str(pending["variant"])
        payload = ((self.store.round(self.name, t) or {}).get("drafts") or {})[variant]["payload"]
        return self._heldout(t, materialize(payload), (t, variant))

    def settle_heldout(self) -> None:
        """At the run's end: measure what ``heldout_pending`` owes, now, and store it with the state."""
        assert self.state is not None
        if not self.state.get("heldout_pending"):
            return
        t0 = time.perf_counter()
        with self.slots():
            held = self.pending_heldout(self.state)
        self.pool = None
        self.raise_pending()
        self._save_state(with_heldout(dict(self.state), held), None, {})
        self.env.phase(int(self.state["t"]) - 1, "heldout (at the run's end)", time.perf_counter() - t0)

    def collect_heldout(self, before: Mapping[str, Any]) -> float | None:
        """On the cluster, at the round's end: when the only trials the round deferred are the previous
        winner's held-out ones and every one is stored already (sent at the round's start, they ran
        beside its analysis and drafts), their figure, with nothing left pending — the step judges at
        once instead of sealing the batch and running again. Else ``None``, the deferred trials as they
        were (docs/algorithm/evolve.md#the-sealed-batch)."""
        deferred = self.deferred
        if not deferred or any(s["candidate"] != HELDOUT for s in deferred):
            return None
        stored = self.store.trial_keys(self.name, sorted({int(s["t"]) for s in deferred}))
        if any(_key(s) not in stored for s in deferred):
            return None
        send, self.send, self.deferred = self.send, None, []
        try:
            held = self.pending_heldout(before)  # reads the stored rows; defers what must run again
        finally:
            self.send = send
        if self.deferred:  # a missing trial to run again: the batch is sealed and joined as before
            self.deferred = deferred
            return None
        return held

    def raise_pending(self) -> None:
        """On the cluster: raise :class:`Pending` when some evaluation deferred trials."""
        if self.deferred:
            raise Pending(list(self.deferred))

    def _save_state(self, state: dict[str, Any], t: int | None, fields: Mapping[str, Any]) -> None:
        tally = state.setdefault("usage", {})
        for role, u in self.env.usage.items():
            mine = tally.setdefault(role, {})
            for key, value in u.items():
                mine[key] = mine.get(key, 0) + value
        self.env.usage.clear()
        self.store.set_run(self.name, state=plain(state), round_t=t, round_fields=fields)
        self.state = plain(state)

    # --- one round ------------------------------------------------------------------------------

    def round_setup(self, before: Mapping[str, Any], incumbent: Harness) -> dict[str, Any]:
        p, t = self.config.params, int(before["t"])
        delta = float(before["delta"])
        records = [EditRecord.from_json(r) for r in before.get("records", [])]
        b_t = edit_budget(min(t, p.T), p.T, p.b_min, p.b_max)
        sigma = stall_flag(before.get("trajectory", []), t, p.w, delta)
        enabled = [
            k for k in in_kind_order(self.config.mode_config.enabled) if k in incumbent.manifest.enabled_kinds
        ]
        tried_kinds = sorted(tried(records))
        expl = exploration(sigma, tried_kinds, p.m_draft, enabled=enabled)
        return {
            "t": t,
            "b_t": b_t,
            "sigma": sigma,
            "enabled": enabled,
            "tried": tried_kinds,
            "exploration": expl.to_json(),
            "directive": exploration_directive(expl, w=p.w, delta=delta),
            "reserved": sorted(reserved_variants(p.m, p.m_draft, sigma, expl.untried)),
            "prune": [pt.to_json() for pt in prune_set(records, t, p.n_prune)],
        }

    def views(self, before: Mapping[str, Any], inc_ev: EvalResult) -> list[View]:
        """The evolve split's views (never a held-out task)."""
        src = before["inc_rows"]
        rows = [
            r
            for r in self.store.trials(self.name, int(src["t"]), str(src["candidate"]))
            if r["world_id"] in self.evolve_ids
        ]
        means = {w: inc_ev.per_task[w].mean for w in self.evolve_ids if w in inc_ev.per_task}
        failing = sorted((w for w in means if means[w] < FAIL_BELOW), key=lambda w: (means[w], w))
        failing = failing[: self.config.n_fail_traces]
        passing = sorted((w for w in means if w not in failing), key=lambda w: (-means[w], w))
        passing = passing[: self.config.n_success_traces]
        out = []
        for w in [*failing, *passing]:
            mine = [r for r in rows if r["world_id"] == w and r["status"] != "cancelled"]
            key = sorted(
                mine,
                key=lambda r: (
                    (float(r["reward"]) if r["status"] == "ok" else -1.0) * (1 if w in failing else -1),
                    int(r["trial"]),
                ),
            )
            out.append(
                View(
                    world=self.world_of(w), row=key[0] if key else None, checks=self.checks[w], mean=means[w]
                )
            )
        return out

    def analyze(self, views: Sequence[View]) -> dict[str, Any]:
        """Digesters per view (``digest_parallel`` at a time), then the three-lens report."""

        def one(view: View) -> dict[str, Any]:
            client = self.env.client(self.config, "digester")
            out = digest(client, view, "fail" if view.mean < FAIL_BELOW else "success")
            self.env.count("digester", client)
            return out

        digests = _each(one, views, self.config.digest_parallel)
        reporter = self.env.client(self.config, "reporter")
        out = report(reporter, digests)
        self.env.count("reporter", reporter)
        return {**out, "digests": digests}

    def world_of(self, task_id: str) -> TurnWorld:
        task = self.suite.task(task_id)
        if task.world_id is not None and task.world_id in self.worlds:
            return self.worlds[task.world_id]
        return request_world(self.suite, task)

    def run_round(self) -> str:
        """Run (or resume) round ``state.t``; returns ``adopted``, ``kept`` or ``infra``."""
        assert self.state is not None
        t_round = time.perf_counter()
        t = int(self.state["t"])
        stored = self.store.round(self.name, t) or {}
        before = stored.get("before") or self.state
        writer = RoundWriter()
        if not stored.get("before"):
            snapshot = plain(before)
            writer.put(lambda: self.store.set_round(self.name, t, before=snapshot))
        incumbent = materialize(before["incumbent"]) if before.get("incumbent") else h0()
        inc_ev = EvalResult.from_json(before["inc_ev"])
        # the previous winner's held-out evaluation runs beside this round (reporting only: no role
        # and no decision reads it); its figure is stored with this round's state
        owed = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rsi-heldout")

        def heldout_beside() -> float | None:
            t0 = time.perf_counter()
            held = self.pending_heldout(before)
            if before.get("heldout_pending"):
                self.env.phase(t, "heldout (previous winner, beside this round)", time.perf_counter() - t0)
            return held

        with writer, self.slots():  # every trial of the round (smoke, candidates, held-out) shares them
            held_future = owed.submit(heldout_beside)
            try:
                return self._round(t, stored, before, incumbent, inc_ev, held_future, writer)
            finally:
                owed.shutdown(wait=True)
                self.pool = None
                self.env.phase(t, "round", time.perf_counter() - t_round)

    def _round(
        self,
        t: int,
        stored: Mapping[str, Any],
        before: Mapping[str, Any],
        incumbent: Harness,
        inc_ev: EvalResult,
        held_future: Future[float | None],
        writer: RoundWriter,
    ) -> str:
        setup = self.round_setup(before, incumbent)
        analysis = stored.get("analysis")
        drafts: dict[str, Any] = dict(stored.get("drafts") or {})
        p, mode = self.config.params, self.config.mode_config
        missing = [(i, v) for i, v in enumerate("ABCDEFGH"[: p.m]) if v not in drafts]
        # the views feed the analysis and the drafts only: a step that finds both stored (the judging
        # step after a batch) does not read the incumbent's trials again
        views = self.views(before, inc_ev) if analysis is None or missing else []
        if analysis is None:
            t_an = time.perf_counter()
            analysis = self.analyze(views)
            an_json, setup_json = plain(analysis), plain(setup)
            writer.put(lambda: self.store.set_round(self.name, t, analysis=an_json, directives=setup_json))
            self.env.phase(t, "analysis", time.perf_counter() - t_an)
        delta, S_star, S_t = float(before["delta"]), float(before["S_star"]), float(before["S_t"])
        records = [EditRecord.from_json(r) for r in before.get("records", [])]
        dctx = DraftContext(
            incumbent=incumbent,
            t=t,
            b_t=setup["b_t"],
            S_t=S_t,
            delta=delta,
            params=self.config.consolidation_params(),
            records=before.get("records", []),
            analysis=analysis,
            exploration=exploration(setup["sigma"], setup["tried"], p.m_draft, enabled=setup["enabled"]),
            reserved=frozenset(setup["reserved"]),
            prune=prune_set(records, t, p.n_prune),
            enabled=setup["enabled"],
            views=views,
            worlds=[v.world for v in views],
        )
        lock = threading.Lock()
        gate_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rsi-gate")
        if missing:  # the screen's view of the round, built once beside the proposers' first calls
            dctx = dataclasses.replace(dctx, gate=gate_pool.submit(round_gate, dctx).result)

        written: dict[str, Future[None]] = {}

        def store_drafts() -> Future[None]:
            """Queue the drafts as they are now (call under ``lock``: snapshots are written in order). Each
            draft is copied: a smoke sets its keys while an earlier snapshot may still be written."""
            snapshot = {v: dict(d) for v, d in sorted(drafts.items())}
            return writer.put(lambda: self.store.set_round(self.name, t, drafts=snapshot))

        def draft_one(item: tuple[int, str]) -> None:
            i, v = item
            proposer = self.env.client(self.config, "proposer")
            critic = self.env.client(self.config, "critic")
            draft = draft_candidate(dctx, v, i, proposer=proposer, critic=critic).to_json()
            self.env.count("proposer", proposer)
            self.env.count("critic", critic)
            with lock:
                drafts[v] = plain(draft)
                written[v] = store_drafts()

        stop = (
            StopContext(S_star, delta, S_t, p.invalid_missing_frac, mode.hopeless_rule)
            if mode.early_stop
            else None
        )

        def candidate(v: str) -> Candidate:
            d = drafts[v]
            edits = tuple(Edit.from_json(e) for e in d.get("edits") or [])
            # no trial row before the draft it measures: the smoke's calls start at once, its rows wait
            # for the draft's store (off the chain: it is written while the smoke's calls run)
            draft_stored = written[v].result if d.get("gate") is None and v in written else None
            if d.get("gate") is None and "smoke" not in d:
                t_smoke = time.perf_counter()
                smoke = self.smoke(t, v, materialize(d["payload"]), draft_stored)
                t_stored = time.perf_counter()
                with lock:
                    d["smoke"] = smoke
                    if not smoke["ok"]:
                        d["gate"], d["detail"] = "smoke_fail", smoke["detail"]
                    store_drafts()
                self.env.phase(t, f"smoke {v}", t_stored - t_smoke)
                self.env.phase(t, f"smoke stored {v}", time.perf_counter() - t_stored)
            if d.get("gate") is not None:
                return Candidate(v, edits, None, gate_failure=d["gate"], detail=str(d.get("detail") or ""))
            if draft_stored is not None:
                draft_stored()
            rows = self.evaluate(t, v, materialize(d["payload"]), self.evolve_ids, p.k, stop=stop, ref=(t, v))
            if rows is None:
                return Candidate(v, edits, None, gate_failure="pending")
            judged_at = StopContext(S_star, delta, S_t, p.invalid_missing_frac, mode.hopeless_rule)
            asm = assemble(list(self.evolve_ids), self.checks, rows, p.k, f"r{t}{v}", judged_at)
            if asm.ev is None:
                return Candidate(v, edits, None, gate_failure=asm.gate, detail=asm.detail)
            extra = {**asm.ev.extra, "touched_params": list(d.get("set_addresses") or [])}
            return Candidate(v, edits, dataclasses.replace(asm.ev, extra=extra), payload=d["payload"])

        def pipeline(item: tuple[int, str]) -> Candidate:
            """One variant from draft to evaluation: its trials start as soon as its draft passed."""
            t0 = time.perf_counter()
            if item in missing:
                draft_one(item)
            t1 = time.perf_counter()
            out = candidate(item[1])
            self.env.phase(t, f"draft {item[1]}", t1 - t0)
            self.env.phase(t, f"smoke+evaluation {item[1]}", time.perf_counter() - t1)
            return out

        t_cands = time.perf_counter()
        try:
            cands = _each(pipeline, list(enumerate("ABCDEFGH"[: p.m])), self.config.eval_parallel)
        finally:
            gate_pool.shutdown(wait=True)
        self.env.phase(t, "candidates", time.perf_counter() - t_cands)
        held = held_future.result()
        writer.flush()  # every write of the round before its judgement's transaction
        if held is None and self.deferred:
            held = self.collect_heldout(before)
        self.raise_pending()
        counts = accepted_counts(records, before_t=t)
        winner, decisions = judge(self.config, p, cands, inc_ev, S_star, delta, counts, setup["enabled"])
        record = decision_record(
            t, self.config, p, S_star, delta, setup["enabled"], counts, inc_ev, cands, decisions, winner
        )
        state = apply_judgement(before, t, cands, decisions, winner)
        infra = bool(cands) and all(
            c.ev is None and c.gate_failure in ("smoke_fail", "eval_invalid") for c in cands
        )
        state["infra_streak"] = int(before.get("infra_streak", 0)) + 1 if infra else 0
        state = with_heldout(state, held)
        if winner is not None and self.heldout_ids:
            assert winner.payload is not None
            state["heldout_pending"] = {
                "t": t,
                "variant": winner.variant,
                "version": str(winner.payload["version"]),
            }
        self._save_state(state, t, {"decision": record})
        return "adopted" if winner is not None else ("infra" if infra else "kept")

    def smoke(
        self, t: int, variant: str, harness: Harness, draft_stored: Callable[[], Any] | None = None
    ) -> dict[str, Any]:
        """``smoke_n`` evolve tasks (the first of the trial order) at k = 1: no crash, no missing trial.
        ``draft_stored`` (the draft's write) is waited for before a smoke row is stored, not before its
        calls start.

        **Decision**: the smoke trials are the candidate's own trial-0 slots of those tasks (same seed),
        stored as its trial rows, so a candidate that passes smoke reuses them in its evaluation."""
        tasks: list[str] = []
        for task in [s[0] for s in _order(self.evolve_ids, self.config.seed)]:
            if task not in tasks:
                tasks.append(task)
        tasks = tasks[: self.config.smoke_n]
        if not tasks:
            return {"ok": True, "tasks": [], "missing": 0, "detail": ""}
        clients: dict[str, CountingClient] = {}
        tenv = self.trial_env(clients)
        # a resumed round's stored smoke rows (one read for the smoke's tasks)
        done = {
            str(r["world_id"]): str(r["status"])
            for r in self.store.trials(self.name, t, variant)
            if r["trial"] == 0 and r["attempt"] == 0
        }

        def one(task: str) -> bool:
            if task in done:
                return done[task] == "ok"
            values = run_task(tenv, self.suite.task(task), harness, 0)
            if draft_stored is not None:
                draft_stored()
            row, _ = self.store.save_trial(self.name, t, variant, task, 0, 0, values)
            return bool(row["status"] == "ok")

        oks = (
            self.pool.map(one, tasks, SMOKE)  # ahead of queued evaluation trials: it gates a candidate
            if self.pool is not None
            else _each(one, tasks, self.config.trial_parallel)
        )
        missing = [task for task, ok in zip(tasks, oks, strict=True) if not ok]
        for r, c in clients.items():
            self.env.count(r, c)
        detail = f"smoke: {len(missing)}/{len(tasks)} trials missing" if missing else ""
        return {"ok": not missing, "tasks": tasks, "missing": len(missing), "detail": detail}


def with_heldout(state: dict[str, Any], held: float | None) -> dict[str, Any]:
    """``state`` with its owed held-out figure (``heldout_pending``) appended to ``heldout`` as measured
    (``held``), and nothing owed any more. Unchanged when nothing was owed."""
    pending = state.pop("heldout_pending", None)
    if pending and held is not None:
        entry = {"t": int(pending["t"]), "version": str(pending["version"]), "S": held}
        state["heldout"] = [*state.get("heldout", []), entry]
    return state


def _key(spec: Mapping[str, Any]) -> tuple[int, str, str, int, int]:
    """A deferred trial's row key ``(t, candidate, task, trial, attempt)``."""
    t, trial, attempt = int(spec["t"]), int(spec["trial"]), int(spec["attempt"])
    return (t, str(spec["candidate"]), str(spec["task"]), trial, attempt)


def _each(fn: Callable[[T], R], items: Sequence[T], parallel: int) -> list[R]:
    """``fn`` over ``items`` on up to ``parallel`` threads; results in input order."""
    if parallel <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(parallel, len(items))) as pool:
        return list(pool.map(fn, items))


def _order(task_ids: Sequence[str], seed: int) -> list[tuple[str, int]]:
    from rsi_worker.evolve.evaluation import slot_order

    return slot_order(task_ids, 1, seed)


def _stop_asked(env: EvolveEnv, store: Store, name: str) -> bool:
    if env.stop_file is not None and env.stop_file.exists():
        return True
    return store.run(name)[3]


def run_inline(env: EvolveEnv, name: str, *, max_rounds: int | None = None) -> RunOutcome:
    """Run (or resume) the evolve run ``name`` in this process until it ends, is stopped, or ran
    ``max_rounds`` more rounds (module docstring). A stop asked before this call is cleared."""
    run = _Run(env, name)
    if run.status == "done":
        return RunOutcome("done", int((run.state or {}).get("t", 0)), 0, "already done")
    missing_worlds = [
        t.id for t in run.suite.tasks if t.world_id is not None and t.world_id not in run.worlds
    ]
    if missing_worlds:
        env.store.set_run(name, status="failed")
        return RunOutcome("failed", 0, 0, f"task(s) {', '.join(missing_worlds[:5])}: world no longer stored")
    env.store.set_run(name, status="running", stop_requested=False)
    if run.state is None:
        run.baseline()
    assert run.state is not None
    T, done = run.config.params.T, 0
    while int(run.state["t"]) < T:
        if _stop_asked(env, env.store, name):
            run.settle_heldout()
            env.store.set_run(name, status="stopped")
            return RunOutcome("stopped", int(run.state["t"]), done, "stop requested")
        if max_rounds is not None and done >= max_rounds:  # an owed held-out runs beside the next round
            env.store.set_run(name, status="stopped")
            return RunOutcome("stopped", int(run.state["t"]), done, "round limit of this call")
        run.run_round()
        done += 1
        if int(run.state.get("infra_streak", 0)) >= INFRA_STREAK:
            run.settle_heldout()
            env.store.set_run(name, status="failed")
            return RunOutcome(
                "failed",
                int(run.state["t"]),
                done,
                f"{INFRA_STREAK} rounds in a row failed on infrastructure",
            )
    run.settle_heldout()
    env.store.set_run(name, status="done")
    return RunOutcome("done", int(run.state["t"]), done)


def run_step(
    env: EvolveEnv, name: str, send: Callable[[list[dict[str, Any]]], None] | None = None
) -> RunOutcome:
    """One step of the run on the cluster (docs/algorithm/evolve.md#on-the-cluster): the baseline or one
    round, as far as the stored trials allow. Returns ``pending`` with the trial specs to fan out (the
    step runs again once they are stored), ``running`` after a finished baseline or round (the next
    step follows), or the run's final status. The stop request is not cleared here (the launch does).
    ``send``: called (from the evaluation's thread) with each evaluation's deferred specs as soon as
    they are known, so their trials run beside the rest of the step; ``pending`` still lists them all."""
    t_load = time.perf_counter()
    run = _Run(env, name)
    run.deferred = []
    run.send = send
    t = int((run.state or {}).get("t", 0))
    env.phase(t if run.state is not None else -1, "load", time.perf_counter() - t_load)
    if run.status in ("done", "failed", "stopped"):
        return RunOutcome(run.status, t, 0, "not running")
    missing_worlds = [
        x.id for x in run.suite.tasks if x.world_id is not None and x.world_id not in run.worlds
    ]
    if missing_worlds:
        env.store.set_run(name, status="failed")
        return RunOutcome("failed", t, 0, f"task(s) {', '.join(missing_worlds[:5])}: world no longer stored")
    try:
        if run.state is None:
            run.baseline()
            return RunOutcome("running", 0, 0, "baseline")
        if t >= run.config.params.T:
            run.settle_heldout()
            env.store.set_run(name, status="done")
            return RunOutcome("done", t, 0)
        if _stop_asked(env, env.store, name):
            run.settle_heldout()
            env.store.set_run(name, status="stopped")
            return RunOutcome("stopped", t, 0, "stop requested")
        run.run_round()
    except Pending as pending:
        return RunOutcome("pending", t, 0, pending=pending.specs)
    assert run.state is not None
    if int(run.state.get("infra_streak", 0)) >= INFRA_STREAK:  # no winner: nothing held-out is owed
        env.store.set_run(name, status="failed")
        return RunOutcome(
            "failed", int(run.state["t"]), 1, f"{INFRA_STREAK} rounds in a row failed on infrastructure"
        )
    return RunOutcome("running", int(run.state["t"]), 1)


def run_trial_spec(
    env: EvolveEnv, name: str, spec: Mapping[str, Any], marks: dict[str, float] | None = None
) -> dict[str, Any]:
    """One deferred trial on the cluster: skipped when its candidate's early stop already holds over
    the stored rows (cooperative early stop), else run and stored under its key (a second delivery
    finds the row and stores nothing). The run's suite and the draft's harness come from this process's
    memo (:mod:`rsi_worker.evolve.memo`): a trial reads its candidate's rows (with an early stop; else
    its own slot's status only, not the rows' JSON) and writes its own, two statements, when the memo
    holds them. ``marks`` gets the wall clock (``time.time()``) after the
    read (``read``), the trial (``ran``) and its row (``saved``) — the bench's timeline."""
    marks = {} if marks is None else marks
    key = spec.get("suite_key")
    static = MEMO.static(env.sessions, name, str(key) if key else None)
    t, cand, task, trial, attempt = (
        int(spec["t"]),
        str(spec["candidate"]),
        str(spec["task"]),
        int(spec["trial"]),
        int(spec["attempt"]),
    )
    brief = {"candidate": cand, "task": task, "trial": trial, "attempt": attempt}
    stop = bool(spec.get("stop")) and attempt == 0
    # the candidate's rows feed the early stop only (their tallies: the rows' JSON — their replays — is
    # never decoded here); without one, the slot's own status is enough
    rows = env.store.trial_tallies(name, t, cand) if stop else []
    slot = (task, trial, attempt)
    own = (
        [r["status"] for r in rows if (r["world_id"], r["trial"], r["attempt"]) == slot]
        if stop
        else env.store.trial_status(name, t, cand, task, trial, attempt)
    )
    marks["read"] = time.time()
    if own:
        return {**brief, "status": own[0], "stored": True}
    if stop:
        S_star, delta, S_t = (float(x) for x in spec["stop"])
        ids = static.heldout_ids if spec.get("split") == "heldout" else static.evolve_ids
        job = EvalJob(name, t, cand, tuple(ids), static.checks, int(spec["k"]), static.config.seed)
        A, B, R = bounds(job, rows)
        if can_stop_exactly(A, B, R, S_star, delta, S_t):
            return {**brief, "status": "skipped"}
    ref = spec.get("harness")
    harness = h0() if ref is None else MEMO.harness(env.sessions, name, int(ref[0]), str(ref[1]))
    config = static.config
    clients: dict[str, CountingClient] = {}

    def role(r: str) -> Any:
        if r not in clients:
            clients[r] = env.client(config, r)
        return clients[r]

    retry = RetryPolicy.from_settings(env.settings)
    tenv = TrialEnv(static.suite, role, config.provider, config.model, static.worlds, retry)
    values = run_task(tenv, static.suite.task(task), harness, int(spec["seed"]))
    marks["ran"] = time.time()
    row, _ = env.store.save_trial(name, t, cand, task, trial, attempt, values)
    marks["saved"] = time.time()
    return {**brief, "status": row["status"]}


def status_of(store: Store, name: str) -> dict[str, Any]:
    """Live progress: status, round t of T, S★, S_t, δ, adoptions, held-out S, trials stored this round."""
    suite, config, status, stop_requested, state = store.run(name)
    state = state or {}
    t = int(state.get("t", -1)) if state else -1
    trials = store.trials(name, t)
    return {
        "name": name,
        "suite": suite,
        "status": status,
        "stop_requested": stop_requested,
        "t": t,
        "T": config.params.T,
        "S_star": state.get("S_star"),
        "S_t": state.get("S_t"),
        "delta": state.get("delta"),
        "adopted": len(state.get("accepted", [])),
        "heldout": state.get("heldout", []),
        "round_trials": len(trials),
        "round_trials_by_candidate": {
            c: sum(1 for r in trials if r["candidate"] == c) for c in sorted({r["candidate"] for r in trials})
        },
        "usage": state.get("usage", {}),
        "calibration": state.get("calibration"),
    }
