"""RRSI value types that report derived results (docs/algorithm/formulas.md §2.1): the calibration of δ,
history
summaries (accepted edits, prune targets), the exploration state and scoreboard rows.

Conventions as in :mod:`rsi_common.math.values`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rsi_common.errors import InvalidInput
from rsi_common.math import _validate as v

__all__ = ["AcceptedEdit", "AttributionRow", "Calibration", "Exploration", "PruneTarget"]


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class Calibration:
    """The calibrated noise band δ and how it was obtained (docs/algorithm/formulas.md §2.9).

    ``sd_null`` is ``None`` for a single base evaluation (R = 1); ``S_per_eval`` and
    ``max_abs_diff`` are set only when R ≥ 2. ``k`` is the trials per task of the **first** base
    evaluation and ``n_tasks`` the number of distinct tasks over all of them (project decision).
    ``S_base`` / ``C_base`` are Ŝ / Ĉ of the pooled base evaluations.
    """

    delta: float
    z: float
    sd_null: float | None
    sd_null_bootstrap: float
    se_bootstrap: float
    method: str
    n_evals: int
    k: int
    n_tasks: int
    S_base: float
    C_base: float | None
    S_per_eval: tuple[float, ...] | None = None
    max_abs_diff: float | None = None

    def __post_init__(self) -> None:
        for name in ("delta", "z", "sd_null_bootstrap", "se_bootstrap"):
            v.non_negative(name, getattr(self, name))
        for name in ("sd_null", "max_abs_diff"):
            if getattr(self, name) is not None:
                v.non_negative(name, getattr(self, name))
        v.text("method", self.method)
        v.integer("n_evals", self.n_evals, 1)
        v.integer("k", self.k, 1)
        v.integer("n_tasks", self.n_tasks, 0)
        v.unit_interval("S_base", self.S_base)
        v.optional_number("C_base", self.C_base)
        if self.S_per_eval is not None:
            _set(self, "S_per_eval", tuple(v.unit_interval("S_per_eval", s)
                                           for s in v.sequence("S_per_eval", self.S_per_eval)))

    def to_json(self) -> dict[str, Any]:
        """Keys in field order; ``S_per_eval`` / ``max_abs_diff`` only when set."""
        out: dict[str, Any] = {
            "delta": self.delta,
            "z": self.z,
            "sd_null": self.sd_null,
            "sd_null_bootstrap": self.sd_null_bootstrap,
            "se_bootstrap": self.se_bootstrap,
            "method": self.method,
            "n_evals": self.n_evals,
            "k": self.k,
            "n_tasks": self.n_tasks,
            "S_base": self.S_base,
            "C_base": self.C_base,
        }
        if self.S_per_eval is not None:
            out["S_per_eval"] = list(self.S_per_eval)
        if self.max_abs_diff is not None:
            out["max_abs_diff"] = self.max_abs_diff
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Calibration:
        """Inverse of :meth:`to_json`."""
        d = v.mapping("Calibration", d)
        what = "Calibration"
        per_eval = d.get("S_per_eval")
        return cls(
            **{name: v.required(d, name, what) for name in (
                "delta", "z", "sd_null", "sd_null_bootstrap", "se_bootstrap", "method", "n_evals",
                "k", "n_tasks", "S_base")},
            C_base=d.get("C_base"),
            S_per_eval=None if per_eval is None else tuple(v.sequence("S_per_eval", per_eval)),
            max_abs_diff=d.get("max_abs_diff"),
        )


@dataclass(frozen=True)
class AcceptedEdit:
    """An accepted history row of one kind, as shown with the prune set (docs/algorithm/formulas.md §2.5)."""

    t: int | None
    edit_id: str | None
    hypothesis: str | None
    delta_S: float | None

    def to_json(self) -> dict[str, Any]:
        """Keys ``t, edit_id, hypothesis, delta_S``."""
        return {"t": self.t, "edit_id": self.edit_id, "hypothesis": self.hypothesis, "delta_S": self.delta_S}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AcceptedEdit:
        """Inverse of :meth:`to_json`; missing keys are ``None``."""
        d = v.mapping("AcceptedEdit", d)
        return cls(d.get("t"), d.get("edit_id"), d.get("hypothesis"), d.get("delta_S"))


@dataclass(frozen=True)
class PruneTarget:
    """A kind of the prune set 𝓑_t (docs/algorithm/formulas.md §2.5): no strictly improving measured edit
    lately.

    ``recent_best_gain`` is ``None`` when the kind has no measured row in the window (g = −∞),
    else g rounded to 5 decimals.
    """

    component: str
    recent_best_gain: float | None
    accepted_edits_in_incumbent: tuple[AcceptedEdit, ...] = ()

    def __post_init__(self) -> None:
        v.text("component", self.component)
        v.optional_number("recent_best_gain", self.recent_best_gain)
        _set(self, "accepted_edits_in_incumbent", tuple(self.accepted_edits_in_incumbent))

    def to_json(self) -> dict[str, Any]:
        """Keys ``component, recent_best_gain, accepted_edits_in_incumbent``."""
        return {
            "component": self.component,
            "recent_best_gain": self.recent_best_gain,
            "accepted_edits_in_incumbent": [a.to_json() for a in self.accepted_edits_in_incumbent],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PruneTarget:
        """Inverse of :meth:`to_json`."""
        d = v.mapping("PruneTarget", d)
        edits = v.sequence("accepted_edits_in_incumbent", d.get("accepted_edits_in_incumbent") or [])
        return cls(
            component=v.required(d, "component", "PruneTarget"),
            recent_best_gain=d.get("recent_best_gain"),
            accepted_edits_in_incumbent=tuple(AcceptedEdit.from_json(a) for a in edits),
        )


@dataclass(frozen=True)
class Exploration:
    """Stall flag σ_t, the untried enabled kinds 𝒰_t (𝒦 order) and the reserved slot count
    (docs/algorithm/formulas.md §2.6)."""

    sigma: int
    untried: tuple[str, ...]
    m_draft: int

    def __post_init__(self) -> None:
        if v.integer("sigma", self.sigma) not in (0, 1):
            raise InvalidInput(f"sigma must be 0 or 1, got {self.sigma!r}")
        _set(self, "untried", v.strings("untried", self.untried))
        v.integer("m_draft", self.m_draft, 0)

    @property
    def reserved_active(self) -> bool:
        """σ = 1 and some enabled kind is untried."""
        return self.sigma == 1 and self.untried != ()

    def to_json(self) -> dict[str, Any]:
        """Keys ``sigma, untried, m_draft, reserved_active`` (the last one informational)."""
        return {"sigma": self.sigma, "untried": list(self.untried), "m_draft": self.m_draft,
                "reserved_active": self.reserved_active}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Exploration:
        """Inverse of :meth:`to_json` (``reserved_active`` is recomputed)."""
        d = v.mapping("Exploration", d)
        what = "Exploration"
        return cls(v.required(d, "sigma", what), tuple(v.sequence("untried", v.required(d, "untried", what))),
                   v.required(d, "m_draft", what))


@dataclass(frozen=True)
class AttributionRow:
    """One scoreboard row (docs/algorithm/formulas.md §2.8): did an edit move the worlds it predicted, and
    what else dropped."""

    t: int | None
    variant: str
    edit_id: str
    hypothesis: str
    n_predicted: int
    predicted_hit: tuple[str, ...]
    hit_rate: float | None
    unpredicted_regressions: tuple[str, ...]
    partial: bool = False

    def __post_init__(self) -> None:
        v.optional_integer("t", self.t)
        v.text("variant", self.variant)
        v.text("edit_id", self.edit_id)
        v.text("hypothesis", self.hypothesis)
        v.integer("n_predicted", self.n_predicted, 0)
        _set(self, "predicted_hit", v.strings("predicted_hit", self.predicted_hit))
        v.optional_number("hit_rate", self.hit_rate)
        regressions = v.strings("unpredicted_regressions", self.unpredicted_regressions)
        _set(self, "unpredicted_regressions", regressions)
        if not isinstance(self.partial, bool):
            raise InvalidInput("partial must be a boolean")

    def to_json(self) -> dict[str, Any]:
        """Keys in field order."""
        return {
            "t": self.t,
            "variant": self.variant,
            "edit_id": self.edit_id,
            "hypothesis": self.hypothesis,
            "n_predicted": self.n_predicted,
            "predicted_hit": list(self.predicted_hit),
            "hit_rate": self.hit_rate,
            "unpredicted_regressions": list(self.unpredicted_regressions),
            "partial": self.partial,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AttributionRow:
        """Inverse of :meth:`to_json`; ``partial`` defaults to False."""
        d = v.mapping("AttributionRow", d)
        what = "AttributionRow"

        def seq(key: str) -> Sequence[Any]:
            return v.sequence(key, d.get(key) or [])

        return cls(
            t=d.get("t"),
            variant=v.required(d, "variant", what),
            edit_id=v.required(d, "edit_id", what),
            hypothesis=d.get("hypothesis") or "",
            n_predicted=v.required(d, "n_predicted", what),
            predicted_hit=tuple(seq("predicted_hit")),
            hit_rate=d.get("hit_rate"),
            unpredicted_regressions=tuple(seq("unpredicted_regressions")),
            partial=bool(d.get("partial")),
        )
