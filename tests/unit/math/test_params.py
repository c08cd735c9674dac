"""RRSIParams (docs/algorithm/formulas.md §1.3), ModeConfig (§1.5) and ConsolidationParams.rrsi() (§1.4)."""

from __future__ import annotations

import json

import pytest

from rsi_common.config import ConsolidationParams
from rsi_common.errors import InvalidInput
from rsi_common.kinds import K_ENABLED_PRODUCTION, KINDS
from rsi_common.math import ModeConfig, RRSIParams


def test_defaults_match_spec() -> None:
    p = RRSIParams()
    assert (p.T, p.k, p.m, p.b_min, p.b_max, p.w, p.m_draft) == (20, 2, 2, 1, 4, 3, 1)
    assert p.delta is None and p.delta_z == 2.0
    assert (p.beta0, p.beta1, p.w_s, p.w_c, p.w_n) == (0.10, 40.0, 100.0, 15.0, 0.5)
    assert p.n_prune == 4 and p.invalid_missing_frac == 0.15


@pytest.mark.parametrize("kwargs", [
    {"k": 0}, {"m": 0}, {"b_min": 0}, {"b_min": 3, "b_max": 2}, {"w": 0}, {"m_draft": -1},
    {"m_draft": 3, "m": 2}, {"delta": -0.1}, {"delta": float("nan")}, {"beta0": -1.0}, {"beta1": -0.5},
    {"w_s": -1.0}, {"w_c": float("nan")}, {"w_n": -0.1}, {"n_prune": -1}, {"invalid_missing_frac": 1.5},
    {"invalid_missing_frac": -0.1}, {"delta_z": float("inf")}, {"k": 2.0}, {"T": True}, {"k": "2"},
])
def test_violated_constraint_raises(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RRSIParams(**kwargs)  # type: ignore[arg-type]


def test_t_has_no_constraint_and_delta_zero_is_allowed() -> None:
    assert RRSIParams(T=0).T == 0 and RRSIParams(T=-3).T == -3
    assert RRSIParams(delta=0.0).delta == 0.0
    assert RRSIParams(m_draft=0).m_draft == 0 and RRSIParams(n_prune=0, invalid_missing_frac=1.0).n_prune == 0


def test_params_json_round_trip() -> None:
    p = RRSIParams(T=40, k=3, m=4, b_min=2, b_max=5, w=2, m_draft=2, delta=0.02, delta_z=1.5, beta0=0.15,
                   beta1=24.4, w_s=0.0, w_c=15.0, w_n=0.25, n_prune=6, invalid_missing_frac=0.2)
    d = p.to_json()
    assert list(d) == ["T", "k", "m", "b_min", "b_max", "w", "m_draft", "delta", "delta_z", "beta0", "beta1",
                       "w_s", "w_c", "w_n", "n_prune", "invalid_missing_frac"]
    assert RRSIParams.from_json(json.loads(json.dumps(d))) == p
    assert RRSIParams.from_json({}) == RRSIParams()
    with pytest.raises(InvalidInput, match="unknown key"):
        RRSIParams.from_json({"betaa0": 0.1})


def test_mode_config_knobs() -> None:
    paper, prod = ModeConfig.for_mode("paper"), ModeConfig.for_mode("production")
    assert paper.enabled == KINDS and prod.enabled == K_ENABLED_PRODUCTION
    assert (paper.select_tie, prod.select_tie) == ("paper", "production")
    assert (paper.float_eps, prod.float_eps) == (0.0, 1e-12)
    assert (paper.early_stop, prod.early_stop) == (False, True)
    assert (paper.hopeless_rule, prod.hopeless_rule) == (False, True)
    assert (paper.dream_score, prod.dream_score) == ("raw", "normalised")
    assert (paper.root_rule, paper.root_multi) == ("earliest", False)
    assert (prod.root_rule, prod.root_multi) == ("choose", True)
    assert (paper.v_tol, prod.v_tol) == (0.0, 1e-9)


def test_mode_config_override_and_errors() -> None:
    cfg = ModeConfig.for_mode("production", enabled=["skill", "prompt", "subagent"])
    assert cfg.enabled == ("prompt", "skill", "subagent")
    with pytest.raises(ValueError):
        ModeConfig.for_mode("paper", enabled=["prompt"])
    with pytest.raises(ValueError):
        ModeConfig.for_mode("research")
    with pytest.raises(ValueError):
        ModeConfig.for_mode("production", enabled=["prompt", "telepathy"])
    with pytest.raises(ValueError):
        ModeConfig("paper", ("prompt",))


def test_mode_config_json_round_trip() -> None:
    for cfg in (ModeConfig.for_mode("paper"), ModeConfig.for_mode("production"),
                ModeConfig.for_mode("production", enabled=["memory", "prompt"])):
        assert ModeConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
    assert ModeConfig.from_json({"mode": "paper"}) == ModeConfig.for_mode("paper")
    with pytest.raises(ValueError, match="contradicts"):
        ModeConfig.from_json({"mode": "paper", "float_eps": 1e-12})
    with pytest.raises(ValueError):
        ModeConfig.from_json({"enabled": ["prompt"]})


def test_consolidation_params_rrsi() -> None:
    c = ConsolidationParams()
    p = c.rrsi()
    assert isinstance(p, RRSIParams) and p.delta is None
    for name in ("T", "k", "m", "b_min", "b_max", "w", "m_draft", "delta_z", "beta0", "beta1", "w_s", "w_c",
                 "w_n", "n_prune", "invalid_missing_frac"):
        assert getattr(p, name) == getattr(c, name), name
    assert (p.b_max, p.beta1) == (3, 35.4)
    custom = ConsolidationParams(T=40, k=3, b_max=5, beta1=44.5, invalid_missing_frac=0.3).rrsi()
    assert (custom.T, custom.k, custom.b_max, custom.beta1) == (40, 3, 5, 44.5)
    assert custom.invalid_missing_frac == 0.3
    with pytest.raises(ValueError):
        ConsolidationParams(b_min=4, b_max=3).rrsi()
