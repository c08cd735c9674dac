"""Settings: loaded once into one validated object and passed in explicitly.

Every setting is an environment variable with the prefix ``RSI_`` (docs/algorithm/formulas.md §1.6):

* plain fields: ``RSI_<FIELD>`` (``RSI_DATABASE_URL``, ``RSI_LEASE_S``, …);
* sim model (docs/formats.md#sim-1-configuration): ``RSI_SIM_<FIELD>`` (``RSI_SIM_LATENCY_MS``);
* role models (docs/algorithm/formulas.md §1.6): ``RSI_ROLE_<ROLE>_MODEL`` / ``RSI_ROLE_<ROLE>_PROVIDER`` /
  ``RSI_ROLE_<ROLE>_BASE_URL`` for ``JUDGE``, ``SIGNAL``, ``ANALYST``, ``PROPOSER``, ``CRITIC``;
* consolidation parameters (docs/algorithm/formulas.md §1.4): ``RSI_CONSOLIDATION__<FIELD>``.

An ``RSI_*`` variable that names no setting is an error (:class:`~rsi_common.errors.SettingsError`),
so a misspelt setting is never silently dropped. No module reads the environment at import time:
the environment is read when :class:`Settings` is constructed.

**Validation at load** (``docs/operations/settings.md``): every invalid value — a range, a cross-field
constraint (``b_min > b_max``, ``m_draft > m``, any RRSI constraint of the consolidation parameters, the
visibility timeout against the hard time limit), a URL with an unsupported scheme or a port outside
1..65535 (:mod:`rsi_common.settings_checks`) — makes the constructor raise
:class:`~rsi_common.errors.SettingsError` with one line naming the environment variables and never a
value, so a command fails at once with exit code 2 instead of every run failing later.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from rsi_common.errors import InvalidInput, SettingsError
from rsi_common.math.params import RRSIParams
from rsi_common.settings_checks import check_database_url, check_http_url, check_redis_url, settings_message

__all__ = [
    "ROLES",
    "ConsolidationParams",
    "ProviderName",
    "RoleModel",
    "RoleModels",
    "RuntimeParams",
    "Settings",
    "SimConfig",
    "settings_reference",
]

ProviderName = Literal["sim", "anthropic", "openai"]
_LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
_FACTORY_SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
ROLES: tuple[str, ...] = ("judge", "signal", "analyst", "proposer", "critic")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class SimConfig(_Frozen):
    """The offline sim model's knobs (docs/formats.md#sim-1-configuration)."""

    latency_ms: float = Field(0.0, ge=0)
    """Sleep per call, in milliseconds."""
    jitter_ms: float = Field(0.0, ge=0)
    """Extra uniform sleep in [0, jitter_ms] drawn from the call's seed."""
    noise: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that one active trait is dropped (per trait, per call)."""
    error_rate: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a call raises a provider error."""
    leaky: bool = False
    """The proposer pastes user text into the harness (exercises the critic)."""
    grant: bool = False
    """Proposer variant A adds ``admin_console`` to a ``tools`` list (exercises PV1; ignores focus)."""
    exploit: bool = False
    """Proposer variant B writes a skill "use rcon to spawn the resources directly" (exercises PV3)."""
    seed: int = 0
    """Global seed mixed into every call's seed."""


class RoleModel(_Frozen):
    """Model of one consolidation role; ``None`` fields default to the agent's own model."""

    provider: ProviderName | None = None
    """Provider of the role (sim, anthropic, openai)."""
    model: str | None = None
    """Model name of the role."""
    base_url: str | None = None
    """Endpoint of the role's provider (e.g. an OpenAI-compatible server)."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        return check_http_url(v)


class RoleModels(_Frozen):
    """Per-role model overrides (docs/algorithm/formulas.md §1.6)."""

    judge: RoleModel = RoleModel()
    signal: RoleModel = RoleModel()
    analyst: RoleModel = RoleModel()
    proposer: RoleModel = RoleModel()
    critic: RoleModel = RoleModel()


DEFAULT_CEILINGS: dict[str, float] = {
    "control_flow.turn_budget_soft": 1_000_000,
    "control_flow.turn_budget_hard": 3_000_000,
    "control_flow.repeat_stop_after": 10,
    "client_tool.max_concurrency": 16,
    "context_mgmt.prune_over_tokens": 200_000,
    "context_mgmt.retrieval_timeout_s": 30,
    "context_mgmt.proactive_ratio": 0.95,
    "context_mgmt.target_ratio": 0.9,
}
"""The gate's default ceilings: ``"<kind>.<param>"`` → the highest value a candidate may set
(docs/security/gate.md, "Privileges")."""


class ConsolidationParams(_Frozen):
    """Defaults for turn consolidation (docs/algorithm/formulas.md §1.4)."""

    m: int = Field(2, ge=1, le=8)
    """Candidates per round; variant labels A, B, … in order."""
    k: int = Field(2, ge=1)
    """Trials per evaluation world."""
    n_eval: int = Field(8, ge=1)
    """Maximum number of evaluation worlds W."""
    T: int = 20
    """Budget horizon (rounds)."""
    b_min: int = Field(1, ge=1)
    """Edit budget at and after round T."""
    b_max: int = Field(3, ge=1)
    """Edit budget of round 0 (anneals to b_min)."""
    w: int = Field(3, ge=1)
    """Stall window (rounds)."""
    m_draft: int = Field(1, ge=0)
    """Reserved exploration slots."""
    n_prune: int = Field(4, ge=0)
    """Pruning window (rounds)."""
    beta0: float = Field(0.10, ge=0)
    """Cost rule intercept: ΔC ≤ beta0 + beta1·ΔS."""
    beta1: float = Field(35.4, ge=0)
    """Cost rule slope."""
    w_s: float = Field(100.0, ge=0)
    """In-band rule weight of ΔS."""
    w_c: float = Field(15.0, ge=0)
    """In-band rule weight of ΔC."""
    w_n: float = Field(0.5, ge=0)
    """In-band rule weight of novelty ν."""
    delta_z: float = 2.0
    """Z of the noise band δ."""
    invalid_missing_frac: float = Field(0.15, ge=0.0, le=1.0)
    """Φ: tolerated share of missing trials."""
    repair_rounds: int = Field(1, ge=0)
    """Critic → proposer repairs."""
    parallel: int = Field(8, ge=1)
    """Replay concurrency of one evaluation in-process (the replay queue decides when distributed)."""
    early_stop: bool = True
    """Exact-bound early stop of hopeless candidates."""
    early_stop_wave_s: float = Field(30.0, ge=0.0, le=600.0)
    """Longest wait of a candidate's second-wave trial for its first wave (seconds; 0: no waves, every
    trial starts at once; docs/performance/consolidation.md#trial-order)."""
    max_valid_rate_drop: float = 0.15
    """Rate guard: tolerated fall of the valid-answer rate."""
    max_nosub_rise: float = 0.15
    """Rate guard: tolerated rise of the no-answer rate."""
    history_rounds: int = Field(200, ge=1)
    """Edit-history rows kept (rounds)."""
    cache_versions: int = Field(3, ge=1)
    """Replay cache: harness versions kept."""
    verdict_cache: int = Field(4000, ge=0)
    """Judge verdict cache entries kept."""
    signal_pairs: int = Field(4, ge=0)
    """Implicit-signal pairs read per run."""
    world_pool: int = Field(60, ge=1)
    """Latest worlds read per run."""
    agent_daily_tokens: int = Field(2_000_000, ge=0)
    """Spend cap: consolidation tokens (role calls and replays) one agent may spend per UTC day;
    0 = no cap (docs/consolidation/spend.md)."""
    cluster_daily_tokens: int = Field(0, ge=0)
    """Spend cap: consolidation tokens the whole cluster may spend per UTC day; 0 = no cap."""
    regression_worlds: int = Field(8, ge=0)
    """Lessons kept per agent and replayed in every round (0 = no regression set;
    docs/consolidation/regression.md)."""
    max_instruction_chars: int = Field(4000, ge=0)
    """Growth budget: characters of distinct instruction sentences a harness may hold; a candidate
    above it that adds text is rejected (docs/security/gate.md)."""
    ceilings: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_CEILINGS))
    """Gate ceilings as JSON: ``{"<kind>.<param>": ceiling}``; a candidate may not raise a listed
    param above it (docs/security/gate.md)."""

    @model_validator(mode="after")
    def _rrsi_constraints(self) -> ConsolidationParams:
        try:
            self.rrsi()
        except InvalidInput as exc:  # pydantic reports a ValueError as a validation error
            names = "|".join(sorted(type(self).model_fields, key=len, reverse=True))
            text = re.sub(rf"\b({names})\b", lambda m: f"RSI_CONSOLIDATION__{m[1].upper()}", str(exc))
            raise ValueError(text) from None
        return self

    def rrsi(self) -> RRSIParams:
        """The RRSI parameters of consolidation (docs/algorithm/formulas.md §1.4): the same ``T, k, m, b_min,
        b_max, w,
        m_draft, delta_z, beta0, beta1, w_s, w_c, w_n, n_prune, invalid_missing_frac`` and
        ``delta=None`` (consolidation calibrates δ every run).

        Raises:
            InvalidInput: the combination breaks a constraint of docs/algorithm/formulas.md §1.3 (e.g.
            ``b_min > b_max``
                or ``m_draft > m``).
        """
        return RRSIParams(
            T=self.T, k=self.k, m=self.m, b_min=self.b_min, b_max=self.b_max, w=self.w,
            m_draft=self.m_draft, delta=None, delta_z=self.delta_z, beta0=self.beta0, beta1=self.beta1,
            w_s=self.w_s, w_c=self.w_c, w_n=self.w_n, n_prune=self.n_prune,
            invalid_missing_frac=self.invalid_missing_frac,
        )


class RuntimeParams(_Frozen):
    """The agent runtime's limits, timers, daily caps and prices (docs/runtime/README.md#settings);
    environment ``RSI_RUNTIME__<FIELD>``."""

    max_depth: int = Field(1, ge=0, le=3)
    """Deepest sub-agent level below a root (a root is depth 0)."""
    max_live_children: int = Field(8, ge=1)
    """Unsettled handles one session may hold."""
    max_spawns_per_turn: int = Field(16, ge=1)
    """Spawns one logical turn may make."""
    max_running_per_tree: int = Field(8, ge=1)
    """Turns of one tree running at once (tree slots)."""
    max_slices: int = Field(8, ge=1)
    """Slices of one logical turn; the last wait returns partial results at once."""
    wait_cap_s: int = Field(600, ge=1)
    """Longest wait of ``subagent_wait``, in seconds."""
    child_timeout_s: int = Field(1800, ge=1)
    """A child unsettled this long after its spawn is cancelled by the tick, in seconds."""
    turn_lease_s: int = Field(60, ge=1)
    """TTL of a turn's lease, in seconds; renewed on every call."""
    max_turn_attempts: int = Field(3, ge=1)
    """Crashed attempts of one io before the handle and the agent are ``failed``."""
    turn_reserve_tokens: int = Field(200_000, ge=1)
    """Largest reservation of one turn, in tokens."""
    msg_max_chars: int = Field(16_384, ge=1)
    """Longest message text, in characters."""
    msg_max_pending: int = Field(20, ge=1)
    """Unconsumed messages one mailbox (agent × session) may hold."""
    msg_bucket: int = Field(3, ge=1)
    """Sends an agent may make in a burst (token bucket size)."""
    msg_refill_ms: int = Field(1000, ge=1)
    """Milliseconds to refill one send of the bucket."""
    msg_max_hops: int = Field(8, ge=1)
    """Largest hop count of a message (1 + the largest hop count that started the sender's turn)."""
    msg_per_turn: int = Field(8, ge=1)
    """Messages one turn claims."""
    tick_s: float = Field(5.0, gt=0)
    """Period of ``rsi.tick`` (Celery beat), in seconds."""
    enabled: bool = False
    """This cluster serves queue ``agents``: beat schedules ``rsi.tick`` every ``tick_s``
    (docs/runtime/failures.md#beat-and-deploy). Off: beat and every queue are as without the runtime."""
    idle_evict_s: int = Field(5400, ge=1)
    """An idle agent becomes ``inactive`` after this many seconds."""
    refine_cooldown_s: int = Field(1200, ge=1)
    """An agent may request a refine once per this many seconds."""
    tree_tokens_per_day: int = Field(5_000_000, ge=0)
    """Daily cap: tokens of one tree (turns, spawns, messages, consolidation); 0 = no cap."""
    agent_tokens_per_day: int = Field(2_000_000, ge=0)
    """Daily cap: tokens of one agent's turns; 0 = no cap."""
    tree_usd_per_day: float | None = Field(None, ge=0)
    """Daily cap: USD of one tree, by ``prices``; unset = no cap."""
    tree_turns_per_day: int = Field(5000, ge=0)
    """Daily cap: turns of one tree; 0 = no cap."""
    tree_spawns_per_day: int = Field(2000, ge=0)
    """Daily cap: spawns in one tree; 0 = no cap."""
    tree_messages_per_day: int = Field(5000, ge=0)
    """Daily cap: messages sent in one tree; 0 = no cap."""
    prices: dict[str, tuple[float, float]] = Field(default_factory=lambda: {"sim/sim-1": (1.0, 4.0)})
    """``{"<provider>/<model>": [usd_per_mtok_in, usd_per_mtok_out]}`` as JSON."""

    @field_validator("prices")
    @classmethod
    def _prices(cls, v: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for key, (p_in, p_out) in v.items():
            if "/" not in key or not all(p >= 0 and p == p and p != float("inf") for p in (p_in, p_out)):
                raise ValueError("each key must be '<provider>/<model>' and each price a finite USD "
                                 "per million tokens >= 0")
        return v


class Settings(BaseSettings):
    """All settings of a host process or a worker (docs/algorithm/formulas.md §1.6,
    docs/architecture.md#5-modes)."""

    model_config = SettingsConfigDict(
        env_prefix="RSI_",
        env_nested_delimiter="__",
        extra="forbid",
        case_sensitive=False,
        frozen=True,
        use_attribute_docstrings=True,
    )

    database_url: str = "sqlite:///.rsi/rsi.db"
    """SQLAlchemy URL of the durable state: ``postgresql+psycopg://…`` in production, ``sqlite:///…``
    embedded (other schemes are refused)."""
    redis_url: str | None = None
    """Broker, result backend and coordination (``redis://``, ``rediss://``, ``unix://``,
    ``redis+socket://``); unset or empty selects an embedded mode."""
    home: Path = Path(".rsi")
    """Directory of embedded-mode state (SQLite file, private redis-server socket)."""
    mode: Literal["production", "paper"] = "production"
    """Mode of the offline loops (docs/algorithm/formulas.md §1.5); consolidation always judges in production
    mode."""

    lease_s: int = Field(60, ge=1)
    """Per-agent lease TTL in seconds; renewed by every task of a run."""
    run_stale_s: int = Field(900, ge=1)
    """A ``running`` run older than this (database clock) is closed as ``interrupted``."""
    world_retention: int = Field(60, ge=1)
    """Worlds kept per agent."""
    run_retention: int = Field(200, ge=1)
    """Run rows kept per agent."""
    harness_cache_ttl_s: float = Field(15.0, ge=0)
    """Host-side per-process cache of the current harness, in seconds."""
    harness_dir: str | None = None
    """Admin pin: a harness directory or ``builtin:<name>`` (docs/formats.md §5.4)."""
    record_world: bool = True
    """World capture on/off (docs/formats.md §4.1)."""
    record_retry_s: float = Field(10.0, ge=0, le=600)
    """Seconds ``record_turn`` / ``record_signals`` retry a transient database error before the host
    sees ``TurnNotStored`` (0: no retry; docs/operations/failure-recovery.md#host-retries)."""

    default_provider: ProviderName = "sim"
    """Provider of an agent whose turns name none."""
    default_model: str = "sim-1"
    """Model of an agent whose turns name none."""
    anthropic_api_key: SecretStr | None = None
    """Anthropic API key (secret; never logged or stored)."""
    anthropic_base_url: str | None = None
    """Anthropic endpoint override (a proxy or gateway)."""
    openai_api_key: SecretStr | None = None
    """OpenAI API key (secret; never logged or stored)."""
    openai_base_url: str | None = None
    """Any OpenAI-compatible server (vLLM, Ollama, …)."""
    model_timeout_s: float = Field(120.0, gt=0)
    """Per-request timeout of real model clients."""
    model_max_retries: int = Field(3, ge=0)
    """Retries on rate limits, timeouts and 5xx (backoff 1 s, 2 s, 4 s)."""
    model_backoff_s: float = Field(1.0, ge=0)
    """First retry delay; doubled per retry (0 in tests)."""

    model_factory: str | None = None
    """``"package.module:callable"`` returning a model factory for workers (custom providers,
    tests); called with the settings. Default: the built-in clients."""

    check_factory: str | None = None
    """``"package.module:callable"`` returning ``{name: Check}``, the goal and autonomy checks beside
    the built-in ``sim.done`` (docs/runtime/goals.md#checks)."""

    roles: RoleModels = RoleModels()
    sim: SimConfig = SimConfig()
    consolidation: ConsolidationParams = ConsolidationParams()
    runtime: RuntimeParams = RuntimeParams()

    task_soft_time_limit_s: int = Field(600, ge=1)
    """Celery soft time limit of any task."""
    task_time_limit_s: int = Field(660, ge=1)
    """Celery hard time limit of any task."""
    visibility_timeout_s: int = Field(3600, ge=1)
    """Redis broker visibility timeout; must exceed the hard time limit."""
    max_redeliveries: int = Field(3, ge=0)
    """A task redelivered more often than this is answered with a structured failure."""
    sweep_interval_s: float = Field(15.0, gt=0)
    """Period of the sweeper (Celery beat)."""
    task_events: bool = False
    """Celery task events (``worker_send_task_events``, ``task_send_sent_event``, ``rsi worker -E``)
    for Flower's task view and the Celery exporter; off by default: about four ``PUBLISH`` per task
    (docs/performance/consolidation.md#rsi-bench-scale)."""
    metrics_port: int | None = Field(None, ge=1, le=65535)
    """Port of the worker's Prometheus endpoint (1..65535); ``None`` = off."""
    log_format: Literal["json", "text"] = "json"
    """``json``: one JSON object per line (``rsi_worker.observability.logs``); ``text``: one readable line."""
    log_level: str = "INFO"
    """Root log level of ``rsi worker`` / ``rsi beat`` (``-l`` overrides it)."""
    otel: bool = False
    """OpenTelemetry tracing of Celery tasks; needs the ``otel`` extra
    (``rsi_worker.observability.tracing``)."""
    api_rate_per_min: int = Field(600, ge=0, le=1_000_000)
    """Service API: requests per minute of a token without a rate of its own; 0 = no limit
    (docs/service/access.md)."""
    api_max_body_bytes: int = Field(16_000_000, ge=1_000, le=64_000_000)
    """Service API: largest request body of a recorded turn, in bytes; other requests: 64 KB
    (docs/service/api.md)."""

    def __init__(self, **values: Any) -> None:
        """Read the environment (and ``values``) and validate.

        Raises:
            SettingsError: an unknown ``RSI_*`` variable or an invalid value (one line naming the
                variables, never a value).
        """
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SettingsError(settings_message(exc)) from None

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, v: str) -> str:
        return check_database_url(v)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, v: str | None) -> str | None:
        return check_redis_url(v)

    @field_validator("anthropic_base_url", "openai_base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        return check_http_url(v)

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, v: str) -> str:
        if v.upper() not in _LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
        return v

    @field_validator("model_factory", "check_factory")
    @classmethod
    def _factory_spec(cls, v: str | None) -> str | None:
        if v is not None and not _FACTORY_SPEC.fullmatch(v):
            raise ValueError("must look like 'package.module:callable'")
        return v

    @model_validator(mode="after")
    def _time_limits(self) -> Settings:
        if self.task_soft_time_limit_s >= self.task_time_limit_s:
            raise ValueError(f"task_soft_time_limit_s ({self.task_soft_time_limit_s}) must be below "
                             f"task_time_limit_s ({self.task_time_limit_s})")
        return self

    @field_validator("visibility_timeout_s")
    @classmethod
    def _visibility_above_limits(cls, v: int, info: Any) -> int:
        hard = info.data.get("task_time_limit_s", 0)
        if v <= hard:
            raise ValueError(f"visibility_timeout_s ({v}) must exceed task_time_limit_s ({hard})")
        return v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _FlatPrefixSource(settings_cls), env_settings)

    def to_env(self) -> dict[str, str]:
        """The ``RSI_*`` variables that reproduce these settings in a child process (secrets
        included: pass the result only to processes you start, never log it)."""
        env: dict[str, str] = {}

        def text(value: Any) -> str:
            if isinstance(value, SecretStr):
                return value.get_secret_value()
            if isinstance(value, (dict, list)):
                return json.dumps(value)
            if isinstance(value, bool):
                return "true" if value else "false"
            return str(value)

        for name in type(self).model_fields:
            value = getattr(self, name)
            if name == "sim":
                env.update({f"RSI_SIM_{k.upper()}": text(v) for k, v in value.model_dump().items()})
            elif name == "roles":
                for role in ROLES:
                    for k, v in getattr(value, role).model_dump().items():
                        if v is not None:
                            env[f"RSI_ROLE_{role.upper()}_{k.upper()}"] = text(v)
            elif name == "consolidation":
                fields = value.model_dump().items()
                env.update({f"RSI_CONSOLIDATION__{k.upper()}": text(v) for k, v in fields})
            elif name == "runtime":
                env.update({f"RSI_RUNTIME__{k.upper()}": text(v) for k, v in value.model_dump().items()
                            if v is not None})
            elif value is not None:
                env[f"RSI_{name.upper()}"] = text(value)
        return env

    def api_key(self, provider: str) -> str | None:
        """The plain API key of ``provider`` (only model clients call this)."""
        secret = {"anthropic": self.anthropic_api_key, "openai": self.openai_api_key}.get(provider)
        return secret.get_secret_value() if secret is not None else None


def settings_reference() -> list[tuple[str, str, str]]:
    """Every environment variable with its default and description: ``(name, default, doc)``.

    The configuration table of README.md is this list (a test keeps them in step).
    """
    rows: list[tuple[str, str, str]] = []

    def default_text(info: FieldInfo) -> str:
        value = info.get_default(call_default_factory=True)
        if isinstance(value, BaseModel):
            return ""
        if isinstance(value, dict):
            return "see the docs" if value else "{}"
        return "" if value is None else str(value)

    for name, info in Settings.model_fields.items():
        if name == "sim":
            rows += [(f"RSI_SIM_{k.upper()}", default_text(f), f.description or "")
                     for k, f in SimConfig.model_fields.items()]
        elif name == "roles":
            rows += [(f"RSI_ROLE_<ROLE>_{k.upper()}", "", f"{f.description or k} ROLE is one of "
                      + ", ".join(r.upper() for r in ROLES) + "; default: the agent's own model.")
                     for k, f in RoleModel.model_fields.items()]
        elif name == "consolidation":
            rows += [(f"RSI_CONSOLIDATION__{k.upper()}", default_text(f), f.description or
            "docs/algorithm/formulas.md §1.4")
                     for k, f in ConsolidationParams.model_fields.items()]
        elif name == "runtime":
            rows += [(f"RSI_RUNTIME__{k.upper()}", default_text(f), f.description or "")
                     for k, f in RuntimeParams.model_fields.items()]
        else:
            rows.append((f"RSI_{name.upper()}", default_text(info), info.description or ""))
    return rows


def _nested_fields(model: type[BaseModel]) -> set[str]:
    return set(model.model_fields)


class _FlatPrefixSource(PydanticBaseSettingsSource):
    """Reads ``RSI_SIM_*`` and ``RSI_ROLE_<ROLE>_*`` and rejects unknown ``RSI_*`` variables."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str] | None = None):
        super().__init__(settings_cls)
        self._environ = os.environ if environ is None else environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        top = set(Settings.model_fields)
        sim_fields = _nested_fields(SimConfig)
        role_fields = _nested_fields(RoleModel)
        consolidation_fields = _nested_fields(ConsolidationParams)
        runtime_fields = _nested_fields(RuntimeParams)
        sim: dict[str, Any] = {}
        roles: dict[str, dict[str, Any]] = {}
        unknown: list[str] = []
        for raw_key, value in self._environ.items():
            key = raw_key.upper()
            if not key.startswith("RSI_"):
                continue
            name = key[4:].lower()
            if name.startswith("consolidation__"):
                if name.split("__", 1)[1] not in {f.lower() for f in consolidation_fields}:
                    unknown.append(raw_key)
                continue
            if name.startswith("runtime__"):
                if name.split("__", 1)[1] not in runtime_fields:
                    unknown.append(raw_key)
                continue
            if name in top and name not in ("sim", "roles", "consolidation", "runtime"):
                continue
            if name.startswith("sim_") and name[4:] in sim_fields:
                sim[name[4:]] = value
                continue
            if name.startswith("role_"):
                role, _, field = name[5:].partition("_")
                if role in ROLES and field in role_fields:
                    roles.setdefault(role, {})[field] = value or None
                    continue
            unknown.append(raw_key)
        if unknown:
            raise SettingsError(
                "unknown setting(s) "
                + ", ".join(sorted(unknown))
                + "; see the configuration table in README.md"
            )
        out: dict[str, Any] = {}
        if sim:
            out["sim"] = sim
        if roles:
            out["roles"] = roles
        return out
