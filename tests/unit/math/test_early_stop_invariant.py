"""docs/architecture.md invariant 4 (docs/algorithm/formulas.md §2.10 "Why decisions are unchanged"): early
stop never changes a decision.

A seeded loop (``random.Random``, no hypothesis) plays thousands of random consolidation-like rounds.
Each round is decided twice: once with the early-stop path (walk the candidate trials in a random order,
stop when ``can_stop_exactly`` holds, judge the stopped candidate at Ŝ_max, record ΔS with
``early_stop_record_delta``) and once with full evaluations (invalid-but-hopeless rule on, as in
production). Winner, S★ update, tried set, prune-set membership, accepted counts, outcomes and
reason codes must agree; the recorded ΔS of a stopped candidate must bound the full ΔS from above
and be negative.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

from rsi_common.kinds import K_ENABLED_PRODUCTION, KINDS
from rsi_common.math import (
    Candidate,
    Edit,
    EditRecord,
    EvalResult,
    RRSIParams,
    TaskResult,
    accepted_counts,
    aggregate,
    can_stop_exactly,
    combine_guards,
    completed_status,
    early_stop_record_delta,
    edit_records,
    exercised_guard,
    outcome_of,
    prune_set,
    rate_guard,
    select_round,
    tried,
    update_s_star,
    upper_lower,
)

ROUNDS = 4000
SEED = 4
PHI = 0.15
EPS = 1e-12
GUARD = combine_guards(
    rate_guard(0.15, 0.15, valid_key="valid_rate", nosub_key="no_submission_rate", eps=EPS), exercised_guard)
TOUCHABLE = ("prompt.system.params.part_order", "memory.archive.params.archive",
             "context.standard.params.keep")
READABLE = ("prompt.system.params", "memory.archive.params.retrieve", "context.standard.params.keep")


@dataclass(frozen=True)
class Trial:
    world: int
    j: int
    passed: int | None  # None = missing
    tokens: int | None


@dataclass
class World:
    crit: list[int]
    k: int

    @property
    def total_weight(self) -> int:
        return self.k * sum(self.crit)


def _evaluate(world: World, trials: list[Trial], job: str, extra: dict[str, Any]) -> EvalResult:
    """Assemble like docs/algorithm/consolidation.md §3.6.3: worlds in W order, rows by j, worlds without
    rows omitted."""
    per: dict[str, TaskResult] = {}
    for wi, c in enumerate(world.crit):
        rows = sorted((t for t in trials if t.world == wi), key=lambda t: t.j)
        if rows:
            per[f"w{wi}"] = TaskResult(tuple(0.0 if t.passed is None else t.passed / c for t in rows),
                                       (float(c),) * len(rows), tuple(t.tokens for t in rows),
                                       sum(t.passed is None for t in rows))
    n_ok = sum(t.passed is not None for t in trials)
    rates = {"valid_rate": n_ok / len(trials), "no_submission_rate": 1 - n_ok / len(trials)}
    return aggregate(per, world.k, job, {**rates, **extra})


def _trials(rng: random.Random, world: World, quality: float, p_missing: float) -> list[Trial]:
    out = []
    for wi, c in enumerate(world.crit):
        for j in range(world.k):
            if rng.random() < p_missing:
                out.append(Trial(wi, j, None, None))
            else:
                tokens = rng.choice([None, rng.randint(200, 4000)])
                out.append(Trial(wi, j, sum(rng.random() < quality for _ in range(c)), tokens))
    return out


@dataclass
class Plan:
    """One candidate: its edits, gate and trial outcomes in the order workers finish them."""

    variant: str
    edits: tuple[Edit, ...]
    gate: str | None
    order: list[Trial]
    extra: dict[str, Any]


def _plan(rng: random.Random, world: World, variant: str) -> Plan:
    edits = tuple(Edit(f"E{i + 1}", rng.choice(KINDS), f"h{i}") for i in range(rng.randint(0, 3)))
    if rng.random() < 0.1:
        return Plan(variant, edits, rng.choice(["critic_reject", "smoke_fail", "no_proposal"]), [], {})
    lo, hi = rng.choice([(0.0, 0.4), (0.2, 0.8), (0.6, 1.0)])
    order = _trials(rng, world, rng.uniform(lo, hi), rng.choice([0.0, 0.0, 0.05, 0.2, 0.5]))
    rng.shuffle(order)
    extra = {"touched_params": rng.sample(TOUCHABLE, rng.randint(0, 2)),
             "params_read": None if rng.random() < 0.3 else rng.sample(READABLE, rng.randint(0, 3))}
    return Plan(variant, edits, None, order, extra)


def _walk(world: World, order: list[Trial], s_star: float, delta: float,
          s_t: float) -> tuple[int | None, tuple[int, int, int], tuple[int, int, int]]:
    """Position after which the stop predicate first holds, (A, B, R) there, and the final (A, B, R)."""
    A, B, R = 0, 0, world.total_weight
    stop_at: int | None = None
    at_stop = (A, B, R)
    for i, t in enumerate(order):
        if t.passed is not None:
            c = world.crit[t.world]
            A, B, R = A + t.passed, B + c, R - c
        holds = can_stop_exactly(A, B, R, s_star, delta, s_t)
        if stop_at is None and holds:
            stop_at, at_stop = i + 1, (A, B, R)
        assert holds or stop_at is None, "monotonicity: once the bound holds it holds for every later state"
    return stop_at, at_stop, (A, B, R)


@dataclass
class Round:
    world: World
    inc_ev: EvalResult
    s_star: float
    delta: float
    t: int
    n_prune: int
    history: list[EditRecord]
    plans: list[Plan]


def _random_round(rng: random.Random) -> Round:
    world = World([rng.randint(1, 4) for _ in range(rng.randint(1, 6))], rng.randint(1, 3))
    inc_ev = _evaluate(world, _trials(rng, world, rng.uniform(0.3, 1.0), 0.0), "incumbent", {})
    unit = 1 / world.total_weight
    delta = rng.choice([0.0, unit, 2 * unit, rng.uniform(0.0, 0.25),
                        max(round(rng.uniform(0, 0.3), 6), unit)])
    s_star = inc_ev.S if rng.random() < 0.5 else min(1.0, inc_ev.S + rng.choice([unit, rng.uniform(0, 0.3)]))
    t = rng.randint(0, 10)
    history: list[EditRecord] = []
    for _ in range(rng.randint(0, 8) if t else 0):
        measured = rng.random() < 0.75
        dS = round(rng.uniform(-0.3, 0.3), 6) if measured else None
        accepted = dS is not None and dS > 0 and rng.random() < 0.5
        outcome = "ACCEPTED" if accepted else "REJECTED" if measured else "critic_reject"
        edit = Edit("E1", rng.choice(KINDS), "h")
        history += edit_records(rng.randint(0, t - 1), rng.choice("AB"), (edit,), outcome, dS, 0.0, accepted,
                                None, None)
    plans = [_plan(rng, world, "ABCD"[i]) for i in range(rng.randint(1, 4))]
    return Round(world, inc_ev, s_star, delta, t, rng.randint(0, 5), history, plans)


def _candidates(rnd: Round, early_stop: bool) -> tuple[list[Candidate], dict[str, tuple[int, int, int]], int]:
    """Candidates of one path, the (A, B, R) of the stopped ones, and how many used the hopeless rule."""
    s_t = rnd.inc_ev.S
    cands: list[Candidate] = []
    stopped: dict[str, tuple[int, int, int]] = {}
    hopeless = 0
    for p in rnd.plans:
        if p.gate is not None:
            cands.append(Candidate(p.variant, p.edits, None, p.gate))
            continue
        stop_at, at_stop, final = _walk(rnd.world, p.order, rnd.s_star, rnd.delta, s_t)
        if early_stop and stop_at is not None:
            partial = _evaluate(rnd.world, p.order[:stop_at], f"r{rnd.t}{p.variant}", p.extra)
            s_max = upper_lower(*at_stop)[0]
            ev = dataclasses.replace(partial, S=s_max, extra={**partial.extra, "early_stopped": True})
            cands.append(Candidate(p.variant, p.edits, ev))
            stopped[p.variant] = at_stop
            continue
        full = _evaluate(rnd.world, p.order, f"r{rnd.t}{p.variant}", p.extra)
        status = completed_status(full, PHI, *final, rnd.s_star, rnd.delta, s_t, hopeless_rule=True)
        if status == "measured":
            hopeless += full.missing > PHI * full.n_expected
            cands.append(Candidate(p.variant, p.edits, full))
        else:
            cands.append(Candidate(p.variant, p.edits, None, "eval_invalid"))
    return cands, stopped, hopeless


@dataclass
class Outcome:
    winner: str | None
    s_star_next: float
    tried: set[str]
    prune: set[str]
    counts: dict[str, int]
    outcomes: list[str]
    codes: list[str]
    recorded_dS: dict[str, float | None]


def _decide(rnd: Round, cands: list[Candidate], stopped: dict[str, tuple[int, int, int]]) -> Outcome:
    params = RRSIParams(n_prune=rnd.n_prune, b_max=3)
    counts = accepted_counts(rnd.history, before_t=rnd.t)
    winner, decisions = select_round(cands, rnd.inc_ev, rnd.s_star, rnd.delta, params, counts, GUARD,
                                     tie="production", enabled=K_ENABLED_PRODUCTION, eps=EPS)
    rows: list[EditRecord] = []
    outcomes: list[str] = []
    recorded: dict[str, float | None] = {}
    for c, d in zip(cands, decisions, strict=True):
        outcome = outcome_of(c, winner, d)
        outcomes.append(outcome)
        if c.ev is None:
            rows += edit_records(rnd.t, c.variant, c.edits, outcome, None, None, False, None, None,
                                 c.gate_failure or "")
            continue
        es = stopped.get(c.variant)
        dS = early_stop_record_delta(*es, rnd.inc_ev.S) if es else d.delta_S
        recorded[c.variant] = dS
        rows += edit_records(rnd.t, c.variant, c.edits, outcome, dS, d.delta_C, outcome == "ACCEPTED", d.S,
                             d.C, d.reason, early_stopped=es is not None)
    records = rnd.history + rows
    s_next = update_s_star(rnd.s_star, winner.ev.S) if winner is not None and winner.ev is not None \
        else rnd.s_star
    return Outcome(
        winner=None if winner is None else winner.variant,
        s_star_next=s_next,
        tried=tried(records),
        prune={p.component for p in prune_set(records, rnd.t + 1, rnd.n_prune)},
        counts=accepted_counts(records),
        outcomes=outcomes,
        codes=[d.reason_code for d in decisions],
        recorded_dS=recorded,
    )


def test_early_stop_never_changes_a_decision() -> None:
    rng = random.Random(SEED)
    stop_rounds = stopped_cands = hopeless_used = winners = 0
    for i in range(ROUNDS):
        rnd = _random_round(rng)
        es_cands, stopped, _ = _candidates(rnd, early_stop=True)
        full_cands, none_stopped, hopeless = _candidates(rnd, early_stop=False)
        assert none_stopped == {}
        es, full = _decide(rnd, es_cands, stopped), _decide(rnd, full_cands, {})
        ctx = f"round {i}: {rnd.world}, S*={rnd.s_star}, delta={rnd.delta}, stopped={sorted(stopped)}"
        assert es.winner == full.winner, ctx
        assert es.s_star_next == full.s_star_next, ctx
        assert es.tried == full.tried, ctx
        assert es.prune == full.prune, ctx
        assert es.counts == full.counts, ctx
        assert es.outcomes == full.outcomes, ctx
        assert es.codes == full.codes, ctx
        for v in stopped:
            upper, exact = es.recorded_dS[v], full.recorded_dS[v]
            assert upper is not None and exact is not None, ctx
            assert exact <= upper < 0, ctx
            idx = "ABCD".index(v)
            assert (es.codes[idx], full.codes[idx]) == ("floor", "floor"), ctx
            assert es.outcomes[idx] == "REJECTED", ctx
        stop_rounds += bool(stopped)
        stopped_cands += len(stopped)
        hopeless_used += hopeless
        winners += full.winner is not None
    # the loop must exercise what it claims to test
    print(f"stop rounds {stop_rounds}, stopped candidates {stopped_cands}, hopeless {hopeless_used}, "
          f"winners {winners}")
    assert stop_rounds > 1000, stop_rounds
    assert hopeless_used > 50, hopeless_used
    assert winners > 500, winners
