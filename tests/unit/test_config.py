"""Settings: prefixes, nesting, secrets, unknown keys."""

from __future__ import annotations

import pytest

from rsi_common.config import ConsolidationParams, Settings, _FlatPrefixSource
from rsi_common.errors import SettingsError


def test_defaults_match_spec() -> None:
    s = Settings()
    assert (s.lease_s, s.run_stale_s, s.world_retention, s.run_retention) == (60, 900, 60, 200)
    assert s.harness_cache_ttl_s == 15.0
    assert s.record_world is True and s.mode == "production"
    assert s.consolidation == ConsolidationParams()
    assert s.consolidation.beta1 == 35.4 and s.consolidation.b_max == 3


def test_env_prefixes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSI_LEASE_S", "5")
    monkeypatch.setenv("RSI_SIM_LATENCY_MS", "200")
    monkeypatch.setenv("RSI_SIM_LEAKY", "true")
    monkeypatch.setenv("RSI_ROLE_CRITIC_MODEL", "gpt-x")
    monkeypatch.setenv("RSI_ROLE_CRITIC_PROVIDER", "openai")
    monkeypatch.setenv("RSI_CONSOLIDATION__K", "3")
    monkeypatch.setenv("RSI_CONSOLIDATION__T", "40")
    monkeypatch.setenv("RSI_RECORD_WORLD", "off")
    s = Settings()
    assert s.lease_s == 5
    assert s.sim.latency_ms == 200.0 and s.sim.leaky is True
    assert s.roles.critic.model == "gpt-x" and s.roles.critic.provider == "openai"
    assert s.roles.judge.model is None
    assert s.consolidation.k == 3 and s.consolidation.T == 40
    assert s.record_world is False


@pytest.mark.parametrize("key", ["RSI_LEASE", "RSI_SIM_LATENCY", "RSI_ROLE_JUDGE_MODL", "RSI_ROLE_BOSS_MODEL",
                                 "RSI_CONSOLIDATION__KK"])
def test_unknown_setting_is_an_error(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    monkeypatch.setenv(key, "1")
    with pytest.raises(SettingsError, match=key):
        Settings()


def test_secrets_never_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-" + "test-not-a-real-key-000000"
    monkeypatch.setenv("RSI_OPENAI_API_KEY", key)
    s = Settings()
    assert "sk-test" not in repr(s) and "sk-test" not in str(s)
    assert "sk-test" not in s.model_dump_json()
    assert s.api_key("openai") == key
    assert s.api_key("anthropic") is None


def test_out_of_range_values_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSI_SIM_NOISE", "1.5")
    with pytest.raises(ValueError, match="noise"):
        Settings()


def test_visibility_timeout_must_exceed_hard_limit() -> None:
    with pytest.raises(ValueError, match="visibility_timeout_s"):
        Settings(task_time_limit_s=100, visibility_timeout_s=50)


def test_flat_source_ignores_foreign_variables() -> None:
    src = _FlatPrefixSource(Settings, {"PATH": "/bin", "RSI_SIM_SEED": "4"})
    assert src() == {"sim": {"seed": "4"}}


def test_to_env_round_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    from rsi_common.config import RoleModel, RoleModels, SimConfig

    s = Settings(lease_s=7, redis_url="redis://x:1/0", sim=SimConfig(latency_ms=150, leaky=True),
                 roles=RoleModels(judge=RoleModel(provider="openai", model="m")),
                 consolidation=ConsolidationParams(T=30, early_stop=False))
    for key, value in s.to_env().items():
        monkeypatch.setenv(key, value)
    assert Settings() == s
