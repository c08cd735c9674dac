"""RRSI parameters (docs/algorithm/formulas.md §1.3) and the two modes, paper and production
(docs/algorithm/formulas.md §1.5)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rsi_common.errors import InvalidInput
from rsi_common.kinds import K_ENABLED_PRODUCTION, KINDS, in_kind_order
from rsi_common.math import _validate as v

__all__ = ["MODES", "ModeConfig", "ModeName", "RRSIParams"]

ModeName = Literal["paper", "production"]
MODES: tuple[str, ...] = ("paper", "production")


@dataclass(frozen=True)
class RRSIParams:
    """Parameters of one RRSI loop (docs/algorithm/formulas.md §1.3), validated at construction.

    A violated constraint raises :class:`~rsi_common.errors.InvalidInput` (a ``ValueError``).
    ``T`` has no constraint: ``T ≤ 0`` means "no annealing" (the budget stays ``b_max``,
    docs/algorithm/formulas.md §2.3).
    Integer fields reject bool and floats; float fields reject NaN and infinities (project
    decision: ``delta_z`` is the only float without a stated range and must merely be finite).
    """

    T: int = 20
    """Budget horizon, in rounds."""
    k: int = 2
    """Trials per task (world)."""
    m: int = 2
    """Candidates per round."""
    b_min: int = 1
    """Smallest edit budget (edits per candidate)."""
    b_max: int = 4
    """Largest edit budget (edits per candidate)."""
    w: int = 3
    """Stall window, in rounds."""
    m_draft: int = 1
    """Reserved exploration slots per round."""
    delta: float | None = None
    """Fixed noise band δ (score units); ``None`` ⇒ calibrate (docs/algorithm/formulas.md §2.9)."""
    delta_z: float = 2.0
    """z of the calibrated band."""
    beta0: float = 0.10
    """Cost rule intercept (relative cost change)."""
    beta1: float = 40.0
    """Cost rule slope (relative cost change per unit of ΔS)."""
    w_s: float = 100.0
    """In-band weight of ΔS."""
    w_c: float = 15.0
    """In-band weight of ΔC."""
    w_n: float = 0.5
    """In-band weight of novelty ν."""
    n_prune: int = 4
    """Pruning window, in rounds."""
    invalid_missing_frac: float = 0.15
    """φ: tolerated share of missing trials."""

    def __post_init__(self) -> None:
        v.integer("T", self.T)
        v.integer("k", self.k, 1)
        v.integer("m", self.m, 1)
        v.integer("b_min", self.b_min, 1)
        v.integer("b_max", self.b_max)
        if self.b_max < self.b_min:
            raise InvalidInput(f"b_max ({self.b_max}) must be >= b_min ({self.b_min})")
        v.integer("w", self.w, 1)
        v.integer("m_draft", self.m_draft, 0)
        if self.m_draft > self.m:
            raise InvalidInput(f"m_draft ({self.m_draft}) must not exceed m ({self.m})")
        v.integer("n_prune", self.n_prune, 0)
        fixes: dict[str, Any] = {}
        if self.delta is not None:
            fixes["delta"] = v.non_negative("delta", self.delta)
        fixes["delta_z"] = v.finite("delta_z", self.delta_z)
        for name in ("beta0", "beta1", "w_s", "w_c", "w_n"):
            fixes[name] = v.non_negative(name, getattr(self, name))
        fixes["invalid_missing_frac"] = v.unit_interval("invalid_missing_frac", self.invalid_missing_frac)
        for name, value in fixes.items():
            object.__setattr__(self, name, value)

    def to_json(self) -> dict[str, Any]:
        """The field names of docs/algorithm/formulas.md §1.3 as keys, in declaration order."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RRSIParams:
        """Inverse of :meth:`to_json`; a missing key takes its default, an unknown key is an error."""
        d = v.mapping("RRSIParams", d)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InvalidInput(f"RRSIParams: unknown key(s) {', '.join(unknown)}")
        return cls(**dict(d))


@dataclass(frozen=True)
class ModeConfig:
    """The knobs that differ between paper and production mode (docs/algorithm/formulas.md §1.5).

    Only ``mode`` and ``enabled`` are stored; every other knob is a property derived from the mode,
    so a configuration can never mix the two modes. Paper mode always enables all nine kinds;
    production defaults to ``K_ENABLED_PRODUCTION`` and accepts an override (any kinds of 𝒦, kept
    in 𝒦 order; an unknown kind name is an error — project decision).
    """

    mode: str = "production"
    enabled: tuple[str, ...] = K_ENABLED_PRODUCTION

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidInput(f"unknown mode {self.mode!r}; expected one of {', '.join(MODES)}")
        enabled = v.strings("enabled", self.enabled)
        unknown = sorted(set(enabled) - set(KINDS))
        if unknown:
            raise InvalidInput(f"enabled: unknown kind(s) {', '.join(unknown)}")
        ordered = in_kind_order(enabled)
        if self.mode == "paper" and ordered != KINDS:
            raise InvalidInput("paper mode enables all kinds; an enabled-kinds override needs production")
        object.__setattr__(self, "enabled", ordered)

    @classmethod
    def for_mode(cls, mode: str, enabled: Iterable[str] | None = None) -> ModeConfig:
        """The configuration of ``mode``; ``enabled`` overrides the kinds (production only).

        Raises:
            InvalidInput: unknown mode, unknown kind, or an override in paper mode.
        """
        if mode == "paper":
            if enabled is not None:
                raise InvalidInput("paper mode enables all kinds; an enabled-kinds override needs production")
            return cls("paper", KINDS)
        if enabled is None:
            return cls(mode, K_ENABLED_PRODUCTION)
        return cls(mode, tuple(enabled))

    @property
    def select_tie(self) -> str:
        """The ``tie`` argument of ``select_round``: the mode name."""
        return self.mode

    @property
    def dream_score(self) -> str:
        """``"raw"`` (paper) or ``"normalised"`` (production) Dream scores."""
        return "raw" if self.mode == "paper" else "normalised"

    @property
    def root_rule(self) -> str:
        """Dream root rule: ``"earliest"`` (paper) or ``"choose"`` (production)."""
        return "earliest" if self.mode == "paper" else "choose"

    @property
    def root_multi(self) -> bool:
        """Whether several roots may be opened in one Dream batch."""
        return self.mode == "production"

    @property
    def v_tol(self) -> float:
        """Tolerance of the Dream V tie (``select_policy``): 0.0 paper, 1e-9 production."""
        return 0.0 if self.mode == "paper" else 1e-9

    @property
    def early_stop(self) -> bool:
        """Whether the exact-bound early stop (docs/algorithm/formulas.md §2.10) is on."""
        return self.mode == "production"

    @property
    def float_eps(self) -> float:
        """The ``eps`` of every selection comparison: 0.0 paper, 1e-12 production."""
        return 0.0 if self.mode == "paper" else 1e-12

    @property
    def hopeless_rule(self) -> bool:
        """Whether the invalid-but-hopeless rule (docs/algorithm/formulas.md §2.10.4) is on."""
        return self.mode == "production"

    def to_json(self) -> dict[str, Any]:
        """``{mode, enabled}`` plus every derived knob (informational, for decision records)."""
        return {
            "mode": self.mode,
            "enabled": list(self.enabled),
            "select_tie": self.select_tie,
            "dream_score": self.dream_score,
            "root_rule": self.root_rule,
            "root_multi": self.root_multi,
            "v_tol": self.v_tol,
            "early_stop": self.early_stop,
            "float_eps": self.float_eps,
            "hopeless_rule": self.hopeless_rule,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModeConfig:
        """Rebuild from ``mode`` and ``enabled``; a derived knob that disagrees with the mode is an error."""
        d = v.mapping("ModeConfig", d)
        mode = v.text("mode", v.required(d, "mode", "ModeConfig"))
        enabled = d.get("enabled")
        cfg = cls(mode, KINDS if enabled is None and mode == "paper" else
                  K_ENABLED_PRODUCTION if enabled is None else v.strings("enabled", enabled))
        derived = cfg.to_json()
        for key, value in d.items():
            if key in ("mode", "enabled"):
                continue
            if key not in derived:
                raise InvalidInput(f"ModeConfig: unknown key {key!r}")
            if value != derived[key]:
                raise InvalidInput(f"ModeConfig: {key}={value!r} contradicts mode {mode!r}")
        return cfg
