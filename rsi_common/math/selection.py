"""Selection (RRSI Eq.5–7, Eq.15–17, Algorithm 2; docs/algorithm/formulas.md §2.4) and the guards of
docs/algorithm/consolidation.md §3.11.

Every comparison takes ``eps`` (0.0 in paper mode, 1e-12 in production, docs/algorithm/formulas.md §1.5) so
that exact
rational ties (ΔS = δ, S' = S★ − δ) fall the way the formula is written despite float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from rsi_common.errors import InvalidInput
from rsi_common.kinds import K_STR, KINDS
from rsi_common.math import _validate as v
from rsi_common.math.estimator import delta_s, relative_cost_change
from rsi_common.math.params import RRSIParams
from rsi_common.math.values import Candidate, Decision, Edit, EditRecord, EvalResult

__all__ = [
    "TIE_RULES",
    "Guard",
    "accepted_counts",
    "combine_guards",
    "cost_rule",
    "covers",
    "edit_records",
    "exercised_guard",
    "floor_ok",
    "judge",
    "novelty",
    "outcome_of",
    "rate_guard",
    "select_round",
    "update_s_star",
]

Guard = Callable[[EvalResult, EvalResult], list[str]]
"""``guard(inc_ev, cand_ev) → violations``; any violation makes a candidate inadmissible."""

TIE_RULES: tuple[str, ...] = ("paper", "production")


def _band(delta: float, eps: float) -> tuple[float, float]:
    return v.non_negative("delta", delta), v.non_negative("eps", eps)


def floor_ok(S_new: float, S_star: float, delta: float, eps: float = 0.0) -> bool:
    """RRSI Eq.5: ``S_new ≥ S★ − δ − eps`` (equality passes)."""
    delta, eps = _band(delta, eps)
    return v.finite("S_new", S_new) >= v.finite("S_star", S_star) - delta - eps


def cost_rule(dS: float, dC: float, nu: int, delta: float, *, beta0: float, beta1: float, w_s: float,
              w_c: float, w_n: float, eps: float = 0.0) -> tuple[bool, str]:
    """The cost rule (real gain) or the in-band rule, with a readable reason.

    * Real gain ``ΔS > δ + eps`` (RRSI Eq.6/7): ok ⇔ ``ΔC ≤ beta0 + beta1·ΔS + eps`` (equality passes).
    * In band otherwise, ΔS = δ included (RRSI Eq.15–17): ok ⇔ ``w_s·ΔS − w_c·ΔC + w_n·ν > eps``
      (strict: exactly 0 fails).

    Args:
        dS: score gain ΔS (score units). dC: relative cost change ΔC. nu: novelty ν ≥ 0.
        delta: noise band δ ≥ 0. beta0, beta1, w_s, w_c, w_n: non-negative weights.
        eps: float tolerance ≥ 0.

    Raises:
        InvalidInput: NaN/infinite values, negative weights, δ, eps or ν.
    """
    dS, dC = v.finite("delta_S", dS), v.finite("delta_C", dC)
    nu = v.integer("nu", nu, 0)
    delta, eps = _band(delta, eps)
    for name, x in (("beta0", beta0), ("beta1", beta1), ("w_s", w_s), ("w_c", w_c), ("w_n", w_n)):
        v.non_negative(name, x)
    if dS > delta + eps:
        budget = beta0 + beta1 * dS
        ok = dC <= budget + eps
        return ok, (f"gain {dS:+.4f} > delta {delta:.4f}; cost change {dC:+.3f} {'<=' if ok else '>'} "
                    f"budget {budget:.3f} (beta0 {beta0} + beta1 {beta1} * dS)")
    shaped = w_s * dS - w_c * dC + w_n * nu
    ok = shaped > eps
    return ok, (f"gain {dS:+.4f} within delta {delta:.4f}; shaped {w_s}*dS - {w_c}*dC + {w_n}*nu = "
                f"{shaped:+.4f} {'>' if ok else '<='} 0 (nu={nu})")


def novelty(components: Iterable[str], accepted_counts: Mapping[str, int], *,
            k_str: Sequence[str] = K_STR, enabled: Sequence[str] = KINDS) -> int:
    """ν (RRSI Eq.16): distinct structural, enabled kinds of ``components`` never accepted before."""
    return len({c for c in components
                if c in k_str and c in enabled and accepted_counts.get(c, 0) == 0})


def accepted_counts(records: Iterable[EditRecord], before_t: int | None = None) -> dict[str, int]:
    """N_t: accepted rows per kind, over all of 𝒦 (zeros included), in 𝒦 order.

    Counts rows with ``accepted ∧ component ∈ 𝒦 ∧ (before_t is None ∨ r.t < before_t)``. A legacy row
    without ``t`` counts as history before every round (project decision). Counts never fall when a
    mechanism is later pruned.
    """
    counts = dict.fromkeys(KINDS, 0)
    for r in records:
        if not r.accepted or r.component not in counts:
            continue
        if before_t is None or r.t is None or r.t < before_t:
            counts[r.component] += 1
    return counts


def _rate(extra: Mapping[str, object], key: str) -> float | None:
    x = extra.get(key)
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x):
        return None
    return float(x)


def rate_guard(max_valid_drop: float = 0.03, max_nosub_rise: float = 0.02, *, valid_key: str = "valid_rate",
               nosub_key: str = "no_sub_rate", eps: float = 0.0) -> Guard:
    """A non-compensatory guard on two rates read from ``EvalResult.extra``.

    A rate that is missing, not a number, bool or NaN on either side is not checked. Violations:
    ``inc_valid − cand_valid > max_valid_drop + eps`` and ``cand_nosub − inc_nosub > max_nosub_rise + eps``.
    ``eps`` is an addition to docs/algorithm/README.md signature (default 0.0 = docs/algorithm/README.md): in
    floats 1.0 − 0.85 is
    0.15000000000000002, so a drop of exactly the limit violates unless the mode's eps is passed.

    Raises:
        InvalidInput: a threshold or ``eps`` is negative or not finite.
    """
    v.non_negative("max_valid_drop", max_valid_drop)
    v.non_negative("max_nosub_rise", max_nosub_rise)
    v.non_negative("eps", eps)

    def guard(inc_ev: EvalResult, cand_ev: EvalResult) -> list[str]:
        out: list[str] = []
        a, b = _rate(inc_ev.extra, valid_key), _rate(cand_ev.extra, valid_key)
        if a is not None and b is not None and a - b > max_valid_drop + eps:
            out.append(f"{valid_key} dropped {a:.4f} -> {b:.4f} (> {max_valid_drop})")
        a, b = _rate(inc_ev.extra, nosub_key), _rate(cand_ev.extra, nosub_key)
        if a is not None and b is not None and b - a > max_nosub_rise + eps:
            out.append(f"{nosub_key} rose {a:.4f} -> {b:.4f} (> {max_nosub_rise})")
        return out

    return guard


def covers(r: str, a: str) -> bool:
    """Whether address ``r`` covers ``a``: equal, or a dot-boundary prefix in either direction."""
    return r == a or a.startswith(r + ".") or r.startswith(a + ".")


def exercised_guard(inc_ev: EvalResult, cand_ev: EvalResult) -> list[str]:
    """docs/algorithm/consolidation.md §3.11: every edited param address must be read by some replay of the
    candidate.

    ``read = cand_ev.extra["params_read"]``, ``touched = cand_ev.extra["touched_params"]``; no
    violation when ``read`` is ``None`` (absent) or ``touched`` is empty. Dead addresses are listed
    once each, sorted (project decision: duplicates collapse).
    """
    read = cand_ev.extra.get("params_read")
    touched = cand_ev.extra.get("touched_params") or ()
    if read is None or not touched:
        return []
    reads = v.strings("params_read", read)
    dead = sorted({a for a in v.strings("touched_params", touched) if not any(covers(r, a) for r in reads)})
    if not dead:
        return []
    return ["edit not exercised by the evaluation (never read in any trial): " + ", ".join(dead)]


def combine_guards(*guards: Guard) -> Guard:
    """One guard whose violations are those of ``guards``, concatenated in order."""

    def guard(inc_ev: EvalResult, cand_ev: EvalResult) -> list[str]:
        return [msg for g in guards for msg in g(inc_ev, cand_ev)]

    return guard


def judge(cand: Candidate, inc_ev: EvalResult, S_star: float, delta: float, params: RRSIParams,
          counts: Mapping[str, int], guard_violations: Sequence[str] | None = None, *,
          enabled: Sequence[str], k_str: Sequence[str] = K_STR, eps: float) -> Decision:
    """Judge one candidate: floor → cost rule → guard, keeping the first failure
    (docs/algorithm/formulas.md §2.4).

    Unmeasured (``cand.ev is None``): inadmissible, reason and code = the gate (or
    ``"not evaluated"`` / ``not_evaluated``), numeric fields ``None``. Measured: ΔS against the
    incumbent's Ŝ, ΔC against its Ĉ, ν from ``counts``; ``params`` supplies the cost weights only
    (δ is the argument).
    """
    if cand.ev is None:
        gate = cand.gate_failure
        return Decision(cand.variant, False, gate or "not evaluated", gate or "not_evaluated")
    S, C = cand.ev.S, cand.ev.C
    dS = delta_s(S, inc_ev.S)
    dC = relative_cost_change(C, inc_ev.C)
    nu = novelty(cand.components, counts, k_str=k_str, enabled=enabled)
    guards = tuple(guard_violations or ())
    ok, cost_reason = cost_rule(dS, dC, nu, delta, beta0=params.beta0, beta1=params.beta1, w_s=params.w_s,
                                w_c=params.w_c, w_n=params.w_n, eps=eps)
    if not floor_ok(S, S_star, delta, eps):
        reason = f"below noise-adjusted floor: S' {S:.4f} < S* {S_star:.4f} - delta {delta:.4f}"
        code = "floor"
    elif not ok:
        reason, code = "cost rule failed: " + cost_reason, "cost_rule"
    elif guards:
        reason, code = "domain guard violated: " + "; ".join(guards), "guard"
    else:
        reason, code = "admissible: " + cost_reason, "admissible"
    return Decision(cand.variant, code == "admissible", reason, code, S, C, dS, dC, nu, guards)


def _paper_key(c: Candidate) -> float:
    return c.ev.S if c.ev is not None else -1.0  # only measured candidates are ever admissible


def _production_key(c: Candidate) -> tuple[float, bool, float, int, str]:
    S, C = (c.ev.S, c.ev.C) if c.ev is not None else (-1.0, None)
    return (-S, C is None, C or 0.0, len(c.edits), c.variant)


def select_round(cands: Sequence[Candidate], inc_ev: EvalResult, S_star: float, delta: float,
                 params: RRSIParams, counts: Mapping[str, int], guard_fn: Guard | None = None, *,
                 tie: str, enabled: Sequence[str], k_str: Sequence[str] = K_STR,
                 eps: float) -> tuple[Candidate | None, list[Decision]]:
    """Algorithm 2: judge every candidate and pick the winner among the admissible ones.

    ``guard_fn(inc_ev, cand.ev)`` is called only for measured candidates. Ties: ``"paper"`` → the
    first candidate with maximal Ŝ; ``"production"`` → smallest key ``(−Ŝ, Ĉ is None, Ĉ or 0.0,
    number of edits, variant label)``.

    Returns:
        ``(winner or None, decisions in candidate order)``; ``None`` keeps the incumbent.

    Raises:
        InvalidInput: unknown ``tie`` or two candidates with the same variant label (project decision).
    """
    if tie not in TIE_RULES:
        raise InvalidInput(f"unknown tie rule {tie!r}; expected one of {', '.join(TIE_RULES)}")
    labels = [c.variant for c in cands]
    if len(set(labels)) != len(labels):
        raise InvalidInput(f"duplicate variant labels in {labels}")
    decisions: list[Decision] = []
    admissible: list[Candidate] = []
    for c in cands:
        violations = guard_fn(inc_ev, c.ev) if (guard_fn is not None and c.ev is not None) else None
        d = judge(c, inc_ev, S_star, delta, params, counts, violations, enabled=enabled, k_str=k_str, eps=eps)
        decisions.append(d)
        if d.admissible:
            admissible.append(c)
    if not admissible:
        return None, decisions
    if tie == "paper":
        return max(admissible, key=_paper_key), decisions  # max keeps the first of equal keys
    return min(admissible, key=_production_key), decisions


def update_s_star(S_star: float, S_next: float) -> float:
    """S★ ← max(S★, S_next) (offline loops; consolidation sets S★ per run)."""
    return max(v.finite("S_star", S_star), v.finite("S_next", S_next))


def outcome_of(cand: Candidate, winner: Candidate | None, decision: Decision) -> str:
    """Unmeasured → gate code or ``not_evaluated``; the winner → ``ACCEPTED``; admissible → ``LOST``;
    else ``REJECTED``."""
    if cand.ev is None:
        return cand.gate_failure or "not_evaluated"
    if cand is winner:
        return "ACCEPTED"
    return "LOST" if decision.admissible else "REJECTED"


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def edit_records(t: int, variant: str, edits: Sequence[Edit], outcome: str, dS: float | None,
                 dC: float | None, accepted: bool, S: float | None, C: float | None, detail: str = "", *,
                 early_stopped: bool = False) -> list[EditRecord]:
    """History rows of one candidate (RRSI Eq.10): one per declared edit, sharing ΔS, ΔC, outcome.

    A candidate with no edits yields one row ``edit_id "C1"`` with component and hypothesis ``None``
    and ``bundle 0``. Stored rounding: ΔS, ΔC, S to 6 decimals, C to 1 decimal; ``detail[:600]``;
    ``hypothesis = e.hypothesis or e.mechanism``; ``bundle = len(edits)``.
    """
    def row(edit_id: str, component: str | None, hypothesis: str | None, bundle: int,
            targets_mode: str | None = None, predicted: tuple[str | int, ...] = ()) -> EditRecord:
        return EditRecord(t=t, variant=variant, edit_id=edit_id, component=component, hypothesis=hypothesis,
                          delta_S=_r(dS, 6), delta_C=_r(dC, 6), accepted=accepted, outcome=outcome,
                          S=_r(S, 6), C=_r(C, 1), bundle=bundle, detail=detail[:600],
                          targets_mode=targets_mode, predicted_affected=predicted,
                          early_stopped=early_stopped)

    if not edits:
        return [row("C1", None, None, 0)]
    return [row(e.id, e.component, e.hypothesis or e.mechanism, len(edits), e.targets_mode,
                e.predicted_affected) for e in edits]
