"""Selection: floor, cost rule, judge, select_round, guards (docs/algorithm/formulas.md §2.4,
docs/algorithm/consolidation.md §3.11, docs/check-vectors.md §9.4, §9.5)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_common.kinds import K_ENABLED_PRODUCTION, KINDS
from rsi_common.math import (
    Candidate,
    Decision,
    Edit,
    EvalResult,
    combine_guards,
    cost_rule,
    covers,
    edit_records,
    exercised_guard,
    floor_ok,
    judge,
    outcome_of,
    rate_guard,
    select_round,
    update_s_star,
)
from tests.unit.math.helpers import PARAMS_94, WEIGHTS_94, cand, scored_ev

ZEROS = dict.fromkeys(KINDS, 0)

# --- docs/check-vectors.md §9.4 cost rule
# -----------------------------------------------------------------------------


@pytest.mark.parametrize(("dS", "dC", "nu", "ok", "fragment"), [
    (0.05, 2.09, 0, True, "budget 2.100"),
    (0.05, 2.11, 0, False, "budget 2.100"),
    (0.0, -0.10, 0, True, "= +1.5000 > 0"),
    (0.0, 0.10, 0, False, "= -1.5000 <= 0"),
    (0.0, 0.0, 1, True, "= +0.5000 > 0"),
])
def test_cost_rule_table(dS: float, dC: float, nu: int, ok: bool, fragment: str) -> None:
    got, reason = cost_rule(dS, dC, nu, 0.02, eps=0.0, **WEIGHTS_94)
    assert got is ok
    assert fragment in reason


def test_cost_rule_reason_formats() -> None:
    _, gain = cost_rule(0.05, 2.11, 0, 0.02, **WEIGHTS_94)
    assert gain == ("gain +0.0500 > delta 0.0200; cost change +2.110 > budget 2.100 "
                    "(beta0 0.1 + beta1 40.0 * dS)")
    _, band = cost_rule(0.0, 0.0, 1, 0.02, **WEIGHTS_94)
    assert band == "gain +0.0000 within delta 0.0200; shaped 100.0*dS - 15.0*dC + 0.5*nu = +0.5000 > 0 (nu=1)"


def test_boundaries() -> None:
    # ΔS = δ is in band
    ok, reason = cost_rule(0.02, 0.0, 0, 0.02, **WEIGHTS_94)
    assert "within delta" in reason and ok  # shaped = 2.0 > 0
    # ΔC exactly at the budget passes (0.1 + 40 * 0.25 = 10.1 exactly representable path)
    ok, reason = cost_rule(0.25, 10.1, 0, 0.02, **WEIGHTS_94)
    assert 0.1 + 40.0 * 0.25 == 10.1 and ok and "<= budget 10.100" in reason
    # an in-band value of exactly 0 fails
    ok, reason = cost_rule(0.0, 0.0, 0, 0.02, **WEIGHTS_94)
    assert not ok and "= +0.0000 <= 0" in reason
    ok, _ = cost_rule(0.015, 0.1, 0, 0.02, **WEIGHTS_94)  # 1.5 - 1.5 = 0
    assert 100.0 * 0.015 - 15.0 * 0.1 == 0.0 and not ok
    # the floor: equality passes
    s_star, delta = 0.75, 0.0625
    assert floor_ok(s_star - delta, s_star, delta)
    assert not floor_ok(s_star - delta - 1e-9, s_star, delta)
    assert floor_ok(0.5, 0.55, 0.05) and floor_ok(8 / 14 - 1 / 14, 8 / 14, 1 / 14, 1e-12)


def test_rrsi_table_6_replays() -> None:
    coding = {"beta0": 0.1, "beta1": 44.5, "w_s": 0.0, "w_c": 15.0, "w_n": 0.5}
    ok, reason = cost_rule(7 / 178, 0.0, 0, 0.017, **coding)
    assert ok and "budget 1.850" in reason
    for nu in range(5):
        ok, reason = cost_rule(3 / 178, 0.261, nu, 0.017, **coding)
        assert not ok and "within delta" in reason
    _, reason = cost_rule(3 / 178, 0.261, 0, 0.017, **coding)
    assert "-3.9150" in reason
    eng = {"beta0": 0.15, "beta1": 24.4, "w_s": 100.0, "w_c": 15.0, "w_n": 0.5}
    ok, reason = cost_rule(6 / 244, 0.016, 0, 0.020, **eng)
    assert ok and "budget 0.750" in reason
    cons = {**WEIGHTS_94, "beta1": 35.4}
    ok, reason = cost_rule(0.25, 0.5, 0, 0.0625, **cons)
    assert ok and "budget 8.950" in reason


def test_eps_vector() -> None:
    unit = 1 / 14
    dS = 9 / 14 - 8 / 14
    assert dS == 0.07142857142857151 and dS > unit
    _, with_eps = cost_rule(dS, 0.0, 0, unit, eps=1e-12, **WEIGHTS_94)
    _, without = cost_rule(dS, 0.0, 0, unit, eps=0.0, **WEIGHTS_94)
    assert "within delta" in with_eps and "> delta" in without


@pytest.mark.parametrize("kwargs", [
    {"dS": float("nan")}, {"dC": float("inf")}, {"nu": -1}, {"delta": -0.01}, {"eps": -1e-12},
    {"beta1": -1.0}, {"w_c": float("nan")}, {"nu": 1.5},
])
def test_cost_rule_bad_input(kwargs: dict[str, float]) -> None:
    args: dict[str, object] = {"dS": 0.05, "dC": 0.0, "nu": 0, "delta": 0.02, "eps": 0.0, **WEIGHTS_94}
    args.update(kwargs)
    with pytest.raises(ValueError):
        cost_rule(args.pop("dS"), args.pop("dC"), args.pop("nu"), args.pop("delta"), **args)  # type: ignore[arg-type]


def test_floor_bad_input() -> None:
    with pytest.raises(ValueError):
        floor_ok(float("nan"), 0.5, 0.1)
    with pytest.raises(ValueError):
        floor_ok(0.5, 0.5, -0.1)
    with pytest.raises(ValueError):
        update_s_star(0.5, float("nan"))


@settings(max_examples=200, deadline=None)
@given(dS=st.floats(-1, 1), dC1=st.floats(-5, 50), dC2=st.floats(-5, 50), nu1=st.integers(0, 5),
       nu2=st.integers(0, 5), delta=st.floats(0, 0.3), eps=st.sampled_from([0.0, 1e-12]),
       w=st.tuples(*[st.floats(0, 100)] * 5))
def test_cost_rule_monotone(dS: float, dC1: float, dC2: float, nu1: int, nu2: int, delta: float, eps: float,
                            w: tuple[float, float, float, float, float]) -> None:
    weights = dict(zip(("beta0", "beta1", "w_s", "w_c", "w_n"), w, strict=True))
    lo_c, hi_c = sorted((dC1, dC2))
    lo_n, hi_n = sorted((nu1, nu2))
    # higher ΔC never turns a fail into a pass
    if not cost_rule(dS, lo_c, lo_n, delta, eps=eps, **weights)[0]:
        assert not cost_rule(dS, hi_c, lo_n, delta, eps=eps, **weights)[0]
    # higher ν never turns a pass into a fail
    if cost_rule(dS, lo_c, lo_n, delta, eps=eps, **weights)[0]:
        assert cost_rule(dS, lo_c, hi_n, delta, eps=eps, **weights)[0]


# --- docs/check-vectors.md §9.5 selection
# -----------------------------------------------------------------------------

INC = scored_ev(5, job="incumbent")
S_STAR, DELTA = 0.55, 0.05


def _select(cands: list[Candidate], tie: str = "production", guard: object = None,
            enabled: tuple[str, ...] = KINDS) -> tuple[Candidate | None, list[Decision]]:
    return select_round(cands, INC, S_STAR, DELTA, PARAMS_94, ZEROS, guard, tie=tie,  # type: ignore[arg-type]
                        enabled=enabled, eps=0.0)


def test_selection_example() -> None:
    assert (INC.S, INC.C) == (0.5, 1000.0)
    a, b = cand("A", scored_ev(7)), cand("B", scored_ev(6), ["skill"])
    c, d = cand("C", scored_ev(3), ["config"]), cand("D", None, ["prompt"], gate="critic_reject")
    for tie in ("paper", "production"):
        winner, decisions = _select([a, b, c, d], tie)
        assert winner is a
        assert [x.admissible for x in decisions] == [True, True, False, False]
        assert "budget 8.100" in decisions[0].reason and "budget 4.100" in decisions[1].reason
        assert "floor" in decisions[2].reason and decisions[2].reason_code == "floor"
        floor = "below noise-adjusted floor: S' 0.3000 < S* 0.5500 - delta 0.0500"
        assert decisions[2].reason.startswith(floor)
        assert (decisions[3].reason, decisions[3].reason_code) == ("critic_reject", "critic_reject")
        assert decisions[3].S is None and decisions[3].delta_S is None and decisions[3].novelty is None
        assert decisions[1].novelty == 1 and decisions[0].novelty == 0
        outcomes = [outcome_of(x, winner, dec) for x, dec in zip([a, b, c, d], decisions, strict=True)]
        assert outcomes == ["ACCEPTED", "LOST", "REJECTED", "critic_reject"]


def test_cost_rule_failure_and_guard_failure() -> None:
    e = cand("E", scored_ev(7, tokens=9600))
    winner, (dec,) = _select([e])
    assert winner is None and dec.reason_code == "cost_rule" and dec.reason.startswith("cost rule failed: ")
    assert dec.delta_C == pytest.approx(8.6)

    def guard(inc: EvalResult, cand_ev: EvalResult) -> list[str]:
        return ["valid rate fell"]

    winner, (dec,) = _select([cand("A", scored_ev(7))], guard=guard)
    assert winner is None and dec.reason_code == "guard"
    assert dec.reason == "domain guard violated: valid rate fell" and dec.guards == ("valid rate fell",)


def test_unevaluated_candidate_without_gate() -> None:
    c = cand("A", None)
    winner, (dec,) = _select([c])
    assert winner is None and (dec.reason, dec.reason_code) == ("not evaluated", "not_evaluated")
    assert outcome_of(c, winner, dec) == "not_evaluated"


def test_guard_called_only_for_measured() -> None:
    calls: list[str] = []

    def guard(inc: EvalResult, cand_ev: EvalResult) -> list[str]:
        calls.append(cand_ev.job)
        return []

    _select([cand("A", scored_ev(7, job="a")), cand("B", None, gate="smoke_fail")], guard=guard)
    assert calls == ["a"]


def _ev_c(c: float | None) -> EvalResult:
    return scored_ev(8, tokens=c)


def test_production_tie_rules() -> None:
    x = cand("X", _ev_c(None), ["prompt"])
    y = cand("Y", _ev_c(1200.0), ["prompt", "config"])
    assert _select([x, y])[0] is y and _select([x, y], "paper")[0] is x
    c1, c2 = cand("A", _ev_c(1500.0)), cand("B", _ev_c(1000.0))
    assert _select([c1, c2])[0] is c2
    two, one = cand("A", _ev_c(1000.0), ["prompt", "config"]), cand("B", _ev_c(1000.0), ["prompt"])
    assert _select([two, one])[0] is one
    lb, la = cand("B", _ev_c(1000.0)), cand("A", _ev_c(1000.0))
    assert _select([lb, la])[0] is la and _select([lb, la], "paper")[0] is lb


def test_select_round_bad_input() -> None:
    with pytest.raises(ValueError):
        _select([cand("A", scored_ev(7))], tie="lexicographic")
    with pytest.raises(ValueError):
        _select([cand("A", scored_ev(7)), cand("A", scored_ev(6))])


def test_production_enabled_kinds_in_judge() -> None:
    sub = cand("A", scored_ev(5), ["subagent"])
    d_prod = judge(sub, INC, S_STAR, DELTA, PARAMS_94, ZEROS, enabled=K_ENABLED_PRODUCTION, eps=1e-12)
    d_paper = judge(sub, INC, S_STAR, DELTA, PARAMS_94, ZEROS, enabled=KINDS, eps=0.0)
    assert (d_prod.novelty, d_paper.novelty) == (0, 1)
    assert not d_prod.admissible and d_paper.admissible  # in band: shaped 0 fails, 0.5 passes


def test_update_s_star() -> None:
    assert update_s_star(0.5, 0.6) == 0.6 and update_s_star(0.6, 0.5) == 0.6


_costs = st.one_of(st.none(), st.sampled_from([800.0, 1000.0, 1200.0, 5000.0]))
_cand_st = st.tuples(st.integers(0, 10), _costs, st.integers(0, 3), st.booleans())


@settings(max_examples=150, deadline=None)
@given(specs=st.lists(_cand_st, min_size=1, max_size=6), s_star=st.floats(0.3, 0.7),
       delta=st.sampled_from([0.0, 0.05, 0.1]), tie=st.sampled_from(["paper", "production"]))
def test_winner_is_admissible_maximum(specs: list[tuple[int, float | None, int, bool]], s_star: float,
                                      delta: float, tie: str) -> None:
    cands = []
    for i, (n_pass, c, n_edits, gated) in enumerate(specs):
        comps = ["prompt", "config", "skill"][:n_edits]
        cands.append(cand("ABCDEFGH"[i], None if gated else scored_ev(n_pass, tokens=c),
                          comps, gate="smoke_fail" if gated else None))
    winner, decisions = select_round(cands, INC, s_star, delta, PARAMS_94, ZEROS, tie=tie, enabled=KINDS,
                                     eps=0.0)
    admissible = [c for c, d in zip(cands, decisions, strict=True) if d.admissible]
    if not admissible:
        assert winner is None
        return
    assert winner is not None and winner in admissible
    best = max(c.ev.S for c in admissible if c.ev is not None)
    assert winner.ev is not None and best == winner.ev.S
    tied = [c for c in admissible if c.ev is not None and best == c.ev.S]
    if tie == "paper":
        assert winner is tied[0]
    else:
        def key(c: Candidate) -> tuple[bool, float, int, str]:
            assert c.ev is not None
            return (c.ev.C is None, c.ev.C or 0.0, len(c.edits), c.variant)
        assert key(winner) == min(key(c) for c in tied)


# --- guards -------------------------------------------------------------------------------------


def _with_extra(**extra: object) -> EvalResult:
    return dataclasses.replace(scored_ev(5), extra=extra)


def test_rate_guard() -> None:
    g = rate_guard(0.15, 0.15, valid_key="valid_rate", nosub_key="no_submission_rate")
    assert g(_with_extra(valid_rate=1.0), _with_extra(valid_rate=0.8)) == [
        "valid_rate dropped 1.0000 -> 0.8000 (> 0.15)"]
    assert g(_with_extra(no_submission_rate=0.0), _with_extra(no_submission_rate=0.2)) == [
        "no_submission_rate rose 0.0000 -> 0.2000 (> 0.15)"]
    assert g(_with_extra(valid_rate=1.0), _with_extra()) == []
    assert g(_with_extra(), _with_extra(valid_rate=0.0)) == []
    assert g(_with_extra(valid_rate=True), _with_extra(valid_rate=0.0)) == []
    assert g(_with_extra(valid_rate=1.0), _with_extra(valid_rate=False)) == []
    assert g(_with_extra(valid_rate="1.0"), _with_extra(valid_rate=0.0)) == []
    # a drop of exactly the limit: 1.0 - 0.85 is 0.15000000000000002 in floats, so only eps keeps it legal
    assert g(_with_extra(valid_rate=1.0), _with_extra(valid_rate=0.85)) != []
    g_eps = rate_guard(0.15, 0.15, valid_key="valid_rate", nosub_key="no_submission_rate", eps=1e-12)
    assert g_eps(_with_extra(valid_rate=1.0), _with_extra(valid_rate=0.85)) == []
    assert g_eps(_with_extra(valid_rate=0.5), _with_extra(valid_rate=0.25)) != []
    default = rate_guard()
    inc, worse = _with_extra(valid_rate=1.0, no_sub_rate=0.0), _with_extra(valid_rate=0.96, no_sub_rate=0.03)
    assert default(inc, worse) == ["valid_rate dropped 1.0000 -> 0.9600 (> 0.03)",
                                   "no_sub_rate rose 0.0000 -> 0.0300 (> 0.02)"]
    with pytest.raises(ValueError):
        rate_guard(-0.1)
    with pytest.raises(ValueError):
        rate_guard(0.1, float("nan"))
    with pytest.raises(ValueError):
        rate_guard(eps=-1.0)


def test_exercised_guard() -> None:
    inc = scored_ev(5)
    dead = exercised_guard(inc, _with_extra(touched_params=["memory.archive.params.archive"],
                                            params_read=["memory.archive.params.retrieve"]))
    prefix = "edit not exercised by the evaluation (never read in any trial): "
    assert dead == [prefix + "memory.archive.params.archive"]
    assert exercised_guard(inc, _with_extra(touched_params=["prompt.system.params.part_overrides.base"],
                                            params_read=["prompt.system.params.part_overrides"])) == []
    assert exercised_guard(inc, _with_extra(touched_params=["context.standard.params.guard"],
                                            params_read=["context.standard.params.guard_extra"])) != []
    assert exercised_guard(inc, _with_extra(touched_params=["a.params.x"])) == []
    assert exercised_guard(inc, _with_extra(touched_params=["a.params.x"], params_read=None)) == []
    assert exercised_guard(inc, _with_extra(touched_params=[], params_read=[])) == []
    two = exercised_guard(inc, _with_extra(touched_params=["b.params.y", "a.params.x", "b.params.y"],
                                           params_read=[]))
    assert two == [prefix + "a.params.x, b.params.y"]


def test_covers() -> None:
    assert covers("a.b", "a.b") and covers("a.b", "a.b.c") and covers("a.b.c", "a.b")
    assert not covers("a.b", "a.bc") and not covers("a.bc", "a.b")


def test_combine_guards() -> None:
    g = combine_guards(rate_guard(0.15, 0.15, valid_key="valid_rate", nosub_key="no_submission_rate"),
                       exercised_guard)
    out = g(_with_extra(valid_rate=1.0), _with_extra(valid_rate=0.5, touched_params=["x.params.a"],
                                                     params_read=[]))
    assert len(out) == 2
    assert out[0].startswith("valid_rate dropped") and out[1].startswith("edit not exercised")


# --- records ------------------------------------------------------------------------------------


def test_edit_records() -> None:
    edits = (Edit("E1", "prompt", "h1", "corrective", ("w1", 3)), Edit("E2", "skill", None, mechanism="m2"))
    rows = edit_records(4, "B", edits, "REJECTED", -0.12345678, 0.33333333, False, 0.61234567, 1234.5678,
                        "x" * 700, early_stopped=True)
    assert [r.edit_id for r in rows] == ["E1", "E2"] and [r.hypothesis for r in rows] == ["h1", "m2"]
    r = rows[0]
    assert (r.delta_S, r.delta_C, r.S, r.C) == (-0.123457, 0.333333, 0.612346, 1234.6)
    assert r.bundle == 2 and len(r.detail) == 600 and r.early_stopped and r.t == 4 and r.variant == "B"
    assert r.targets_mode == "corrective" and r.predicted_affected == ("w1", 3)
    (gate,) = edit_records(5, "A", (), "critic_reject", None, None, False, None, None, "leak")
    assert (gate.edit_id, gate.component, gate.hypothesis, gate.bundle) == ("C1", None, None, 0)
    assert gate.delta_S is None and gate.C is None and not gate.early_stopped
