"""``EvolveConfig`` (docs/algorithm/evolve.md#configuration): RRSIParams (docs/algorithm/formulas.md §1.3)
plus the offline loop's own knobs, validated at construction."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rsi_common.boundary import MAX_MODEL_CHARS, MAX_PROVIDER_CHARS, MAX_SAFE_INT, check_label
from rsi_common.config import ConsolidationParams
from rsi_common.errors import InvalidInput
from rsi_common.math import ModeConfig, RRSIParams
from rsi_worker.evolve.suite import MAX_TASKS, refuse_unknown_keys

__all__ = ["LIMITS", "EvolveConfig"]

LIMITS: dict[str, tuple[int, int]] = {
    "repair_rounds": (0, 20),
    "n_fail_traces": (0, 500),
    "n_success_traces": (0, 500),
    "eval_parallel": (1, 8),
    "trial_parallel": (1, 64),
    "digest_parallel": (1, 512),
    "smoke_n": (0, MAX_TASKS),
    "seed": (0, MAX_SAFE_INT),
    "base_evals": (1, 20),
    "params.T": (0, 1_000),
    "params.k": (1, 100),
}
"""Each integer knob's range ``(lo, hi)``, both included: the caps keep a configuration from making a run
explode (threads, model calls, rows); ``params.m`` is capped at 8 by the variant labels A..H."""


def _int(name: str, x: object, lo: int, hi: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi:
        shown = repr(x)[:40] if isinstance(x, (int, float)) else type(x).__name__
        raise InvalidInput(f"config.{name}: must be an integer from {lo} to {hi:,}, got {shown}")
    return x


def _rate(name: str, x: object) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1:
        raise InvalidInput(f"config.{name}: must be a number in [0, 1] or null, got {x!r}")
    return float(x)


@dataclass(frozen=True)
class EvolveConfig:
    """One evolve run's configuration.

    Guards are "configured thresholds only": ``max_valid_drop`` / ``max_nosub_rise`` (``None`` = no rate
    guard) feed ``rate_guard``; the exercised guard is always on. ``base_evals`` is R, the repeated base
    evaluations of H0 (R ≥ 2 recommended; δ is calibrated from them unless ``params.delta`` is set).
    """

    params: RRSIParams = field(default_factory=lambda: RRSIParams(T=5))
    repair_rounds: int = 5
    n_fail_traces: int = 22
    n_success_traces: int = 6
    eval_parallel: int = 1
    trial_parallel: int = 4
    digest_parallel: int = 6
    mode: str = "production"
    smoke_n: int = 2
    seed: int = 7
    base_evals: int = 2
    max_valid_drop: float | None = 0.03
    max_nosub_rise: float | None = 0.02
    provider: str = "sim"
    model: str = "sim-1"

    def __post_init__(self) -> None:
        for name, (lo, hi) in LIMITS.items():
            owner, _, attr = name.rpartition(".")
            _int(name, getattr(self.params if owner else self, attr), lo, hi)
        if not isinstance(self.mode, str) or len(self.mode) > 40:
            raise InvalidInput("config.mode: must be one of paper, production")
        ModeConfig.for_mode(self.mode)  # raises for an unknown mode
        object.__setattr__(self, "max_valid_drop", _rate("max_valid_drop", self.max_valid_drop))
        object.__setattr__(self, "max_nosub_rise", _rate("max_nosub_rise", self.max_nosub_rise))
        for name, chars in (("provider", MAX_PROVIDER_CHARS), ("model", MAX_MODEL_CHARS)):
            x = getattr(self, name)
            if not isinstance(x, str) or not x:
                raise InvalidInput(f"config.{name}: must be a non-empty string")
            check_label(x, f"config.{name}", max_chars=chars)  # the world's columns it is recorded in
        if self.params.m > 8:
            raise InvalidInput("config.params.m: at most 8 candidates (variant labels A..H)")

    @property
    def mode_config(self) -> ModeConfig:
        return ModeConfig.for_mode(self.mode)

    def consolidation_params(self) -> ConsolidationParams:
        """The drafting roles' view of the parameters (proposer and critic read ``ConsolidationParams``)."""
        p = self.params
        return ConsolidationParams(
            m=p.m,
            k=p.k,
            T=p.T,
            b_min=p.b_min,
            b_max=p.b_max,
            w=p.w,
            m_draft=p.m_draft,
            n_prune=p.n_prune,
            beta0=p.beta0,
            beta1=p.beta1,
            w_s=p.w_s,
            w_c=p.w_c,
            w_n=p.w_n,
            delta_z=p.delta_z,
            invalid_missing_frac=p.invalid_missing_frac,
            repair_rounds=self.repair_rounds,
            parallel=self.trial_parallel,
        )

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["params"] = self.params.to_json()
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EvolveConfig:
        """Inverse of :meth:`to_json`; a missing key takes its default, an unknown key is an error
        naming it."""
        if not isinstance(d, Mapping):
            raise InvalidInput("config: must be a JSON object")
        refuse_unknown_keys("config", d, {f.name for f in dataclasses.fields(cls)})
        kw = dict(d)
        if isinstance(kw.get("params"), Mapping):
            known = {f.name for f in dataclasses.fields(RRSIParams)}
            refuse_unknown_keys("config.params", kw["params"], known)
        if "params" in kw:
            try:
                kw["params"] = RRSIParams.from_json(kw["params"])
            except (InvalidInput, TypeError) as exc:
                raise InvalidInput(f"config.params: {exc}") from None
        try:
            return cls(**kw)
        except TypeError as exc:
            raise InvalidInput(f"config: {exc}") from None
