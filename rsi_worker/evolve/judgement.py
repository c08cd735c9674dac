"""Judging an evolve round (docs/algorithm/evolve.md#judging) and re-judging it (``readjudicate``).

Algorithm 2 (``select_round``) with the mode's tie rule and ``eps``, S★ = the best score so far,
δ = the run's calibrated (or configured) band, N_t from the history rows with ``t_i < t``, the
configured rate guard (if any) plus the exercised guard. Every judgement input is kept in the round's
``decision`` record (the ``decisions.json`` entry of docs/algorithm/evolve.md#files), so
:func:`readjudicate` re-applies the rule to exactly what was judged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rsi_common.errors import InvalidInput
from rsi_common.math import (
    Candidate,
    Decision,
    EditRecord,
    EvalResult,
    Guard,
    RRSIParams,
    accepted_counts,
    can_stop_exactly,
    combine_guards,
    edit_records,
    exercised_guard,
    outcome_of,
    rate_guard,
    select_round,
    update_s_star,
)
from rsi_worker.evolve.config import EvolveConfig

__all__ = [
    "WEIGHTS",
    "NeedsReevaluation",
    "apply_judgement",
    "check_overrides",
    "decision_record",
    "guard_of",
    "judge",
    "plain",
]


class NeedsReevaluation(Exception):
    """A stored early stop no longer holds under the new S★/δ: those candidates must be measured in
    full (``rsi evolve reevaluate``)."""

    def __init__(self, variants: Sequence[str]) -> None:
        super().__init__(
            "early stop no longer holds for variant(s) "
            + ", ".join(variants)
            + "; run `rsi evolve reevaluate`"
        )
        self.variants = list(variants)


def plain(x: Any) -> Any:
    """``x`` as plain JSON values (read-only mappings → dicts, tuples → lists)."""
    if isinstance(x, Mapping):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def guard_of(config: EvolveConfig) -> Guard:
    """The configured thresholds only (no rate guard when both are ``None``) plus the exercised guard."""
    eps = config.mode_config.float_eps
    guards: list[Guard] = []
    if config.max_valid_drop is not None or config.max_nosub_rise is not None:
        guards.append(
            rate_guard(
                config.max_valid_drop if config.max_valid_drop is not None else 1.0,
                config.max_nosub_rise if config.max_nosub_rise is not None else 1.0,
                valid_key="valid_rate",
                nosub_key="no_submission_rate",
                eps=eps,
            )
        )
    guards.append(exercised_guard)
    return combine_guards(*guards)


def judge(
    config: EvolveConfig,
    params: RRSIParams,
    cands: Sequence[Candidate],
    inc_ev: EvalResult,
    S_star: float,
    delta: float,
    counts: Mapping[str, int],
    enabled: Sequence[str],
) -> tuple[Candidate | None, list[Decision]]:
    """Algorithm 2 under the run's mode (tie rule, eps) and guards."""
    mode = config.mode_config
    return select_round(
        cands,
        inc_ev,
        S_star,
        delta,
        params,
        counts,
        guard_of(config),
        tie=mode.select_tie,
        enabled=enabled,
        eps=mode.float_eps,
    )


def decision_record(
    t: int,
    config: EvolveConfig,
    params: RRSIParams,
    S_star: float,
    delta: float,
    enabled: Sequence[str],
    counts: Mapping[str, int],
    inc_ev: EvalResult,
    cands: Sequence[Candidate],
    decisions: Sequence[Decision],
    winner: Candidate | None,
) -> dict[str, Any]:
    """The round's ``decisions.json`` entry: ``{t, mode, eps, S_star, delta, params, enabled, counts,
    incumbent {job, S, C, per_task, extra}, candidates [{variant, edits, gate_failure, detail, ev | null,
    early_stop {A, B, R, delta_S} | null, decision}], winner}``."""
    mode = config.mode_config
    inc = inc_ev.to_json()
    out_cands = []
    for c, d in zip(cands, decisions, strict=True):
        early = c.ev.extra.get("early_stop") if c.ev is not None else None
        out_cands.append(
            {
                "variant": c.variant,
                "edits": [e.to_json() for e in c.edits],
                "gate_failure": c.gate_failure,
                "detail": c.detail,
                "ev": None if c.ev is None else c.ev.to_json(),
                "early_stop": None if early is None else plain(early),
                "decision": {**d.to_json(), "outcome": outcome_of(c, winner, d)},
            }
        )
    out: dict[str, Any] = plain(
        {
            "t": t,
            "mode": mode.mode,
            "eps": mode.float_eps,
            "S_star": S_star,
            "delta": delta,
            "params": params.to_json(),
            "enabled": list(enabled),
            "counts": dict(counts),
            "incumbent": {k: inc[k] for k in ("job", "S", "C", "per_task", "extra")},
            "candidates": out_cands,
            "winner": winner.variant if winner is not None else None,
        }
    )
    return out


def history_rows(
    t: int, cands: Sequence[Candidate], decisions: Sequence[Decision], winner: Candidate | None
) -> list[dict[str, Any]]:
    """The round's history rows (RRSI Eq.10, ``edit_records``); an early stop records its ΔS bound."""
    rows: list[dict[str, Any]] = []
    for c, d in zip(cands, decisions, strict=True):
        outcome = outcome_of(c, winner, d)
        if c.ev is None:
            recs = edit_records(t, c.variant, c.edits, outcome, None, None, False, None, None, c.detail)
        else:
            early = c.ev.extra.get("early_stop")
            dS = float(early["delta_S"]) if early else d.delta_S
            recs = edit_records(
                t,
                c.variant,
                c.edits,
                outcome,
                dS,
                d.delta_C,
                outcome == "ACCEPTED",
                c.ev.S,
                c.ev.C,
                d.reason,
                early_stopped=bool(early),
            )
        rows += [plain(r.to_json()) for r in recs]
    return rows


def apply_judgement(
    before: Mapping[str, Any],
    t: int,
    cands: Sequence[Candidate],
    decisions: Sequence[Decision],
    winner: Candidate | None,
) -> dict[str, Any]:
    """The run state after round ``t`` from the state before it: history rows appended; a winner becomes
    the incumbent (payload, evaluation, S_t) and S★ ← ``update_s_star(S★, S_t)``; the trajectory gets
    the score of H_{t+1}; ``t`` advances."""
    state: dict[str, Any] = plain(dict(before))
    state["records"] = [*state.get("records", []), *history_rows(t, cands, decisions, winner)]
    if winner is not None and winner.ev is not None:
        assert winner.payload is not None
        state["incumbent"] = plain(winner.payload)
        state["inc_ev"] = plain(winner.ev.to_json())
        state["inc_rows"] = {"t": t, "candidate": winner.variant}
        state["S_t"] = winner.ev.S
        state["S_star"] = update_s_star(float(state["S_star"]), winner.ev.S)
        state["accepted"] = [
            *state.get("accepted", []),
            {"t": t, "variant": winner.variant, "version": str(winner.payload.get("version"))},
        ]
    state["trajectory"] = [*state.get("trajectory", []), float(state["S_t"])]
    state["t"] = t + 1
    return state


WEIGHTS = ("beta0", "beta1", "w_s", "w_c", "w_n")
"""The cost weights ``readjudicate`` may override (RRSIParams fields; independent, not a simplex)."""


def _finite_non_negative(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def check_overrides(delta: float | None, weights: Mapping[str, float] | None) -> None:
    """Refuse a re-judgement's overrides before anything is read or written: an unknown weight name, a
    weight or δ that is not a finite number >= 0 (NaN, ±inf, negative), each named.

    Raises:
        InvalidInput: the first bad override.
    """
    unknown = sorted(k for k in (weights or {}) if k not in WEIGHTS)
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown)
        raise InvalidInput(f"readjudicate: unknown weight(s) {shown}; allowed: {', '.join(WEIGHTS)}")
    for k, v in (weights or {}).items():
        if not _finite_non_negative(v):
            raise InvalidInput(f"readjudicate: --weight {k}: must be a finite number >= 0, got {v!r}")
    if delta is not None and not _finite_non_negative(delta):
        raise InvalidInput(f"readjudicate: --delta must be a finite number >= 0, got {delta!r}")


def readjudicate(
    config: EvolveConfig,
    record: Mapping[str, Any],
    before: Mapping[str, Any],
    payloads: Mapping[str, Any],
    *,
    delta: float | None = None,
    weights: Mapping[str, float] | None = None,
) -> tuple[Candidate | None, list[Candidate], list[Decision], dict[str, Any]]:
    """Re-apply Algorithm 2 to round ``record['t']``'s stored inputs with another δ and/or cost weights
    (``beta0, beta1, w_s, w_c, w_n``).

    N_t is recounted from the history rows with ``t_i < t``; each stored early stop is checked again
    with ``can_stop_exactly`` under S★ and the new δ.

    Raises:
        NeedsReevaluation: an early stop no longer holds (the variants are named).
        InvalidInput: an unknown weight name or a bad value.
    """
    t = int(record["t"])
    check_overrides(delta, weights)
    params = RRSIParams.from_json(record["params"])
    if weights:
        params = RRSIParams.from_json({**params.to_json(), **{k: float(v) for k, v in weights.items()}})
    new_delta = float(record["delta"]) if delta is None else float(delta)
    S_star, S_t = float(record["S_star"]), float(record["incumbent"]["S"])
    stale = []
    for c in record["candidates"]:
        es = c.get("early_stop")
        if es and not can_stop_exactly(
            float(es["A"]), float(es["B"]), float(es["R"]), S_star, new_delta, S_t
        ):
            stale.append(str(c["variant"]))
    if stale:
        raise NeedsReevaluation(stale)
    records = [EditRecord.from_json(r) for r in before.get("records", [])]
    counts = accepted_counts(records, before_t=t)
    per_task = record["incumbent"]["per_task"]
    inc_ev = EvalResult.from_json(
        {
            **record["incumbent"],
            "k": params.k,
            "n_expected": sum(len(tr["rewards"]) for tr in per_task.values()),
            "missing": sum(int(tr.get("missing", 0)) for tr in per_task.values()),
        }
    )
    cands = [
        Candidate.from_json(
            {
                "variant": c["variant"],
                "edits": c["edits"],
                "ev": c["ev"],
                "gate_failure": c["gate_failure"],
                "detail": c["detail"],
                "payload": payloads.get(c["variant"]),
            }
        )
        for c in record["candidates"]
    ]
    winner, decisions = judge(config, params, cands, inc_ev, S_star, new_delta, counts, record["enabled"])
    new = decision_record(
        t, config, params, S_star, new_delta, record["enabled"], counts, inc_ev, cands, decisions, winner
    )
    return winner, cands, decisions, new
