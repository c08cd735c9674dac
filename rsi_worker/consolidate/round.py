"""The round of a run, typed: what steps 8–17 of docs/algorithm/consolidation.md#33-the-run-step-by-step
measure and decide, carried in ``RoundContext.round`` (stored in ``rsi_runs.params.round``).

A round grows in three stages, each a frozen value:

* after the incumbent is measured (step 8): its summary :class:`IncumbentBrief` and ``inc_ev``;
* after the round is set up (step 10): :class:`RoundParams` (unit, δ, S★, b_t, σ, enabled, tried,
  exploration, reserved, prune, the failing worlds);
* after judging (steps 14–17): :class:`Judged` (the history rows, scoreboard, gain, winner,
  lessons learned).

The JSON is flat, with the key names of the first (unversioned) run context, so readers of
``rsi_runs.params.round`` (the console, the API's trial matrix, ``rsi bench``) read every version
alike (docs/decisions.md, *Run context*): the :class:`RoundParams` keys, then ``incumbent``,
``inc_ev`` and ``judged``. :meth:`Round.from_json` refuses an unknown key, a missing key of a
stage that is present, and a value of the wrong type, naming the field
(:mod:`rsi_worker.consolidate.fields`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rsi_common.errors import InvalidInput
from rsi_common.math import Calibration, EvalResult, Exploration, PruneTarget
from rsi_common.stored import StoredDataError, safe_text
from rsi_worker.consolidate import fields as f

__all__ = ["PARAM_KEYS", "ROUND_KEYS", "IncumbentBrief", "Judged", "Learned", "Round", "RoundParams"]

_T = TypeVar("_T")

PARAM_KEYS = ("unit", "calibration", "delta", "S_star", "S_t", "b_t", "sigma", "enabled", "tried",
              "exploration", "reserved", "prune", "failing")
"""The keys of :class:`RoundParams`, in JSON order."""
ROUND_KEYS = (*PARAM_KEYS, "incumbent", "inc_ev", "judged")
"""Every key a stored round may hold."""
_CALIBRATION_KEYS = ("delta", "z", "sd_null", "sd_null_bootstrap", "se_bootstrap", "method", "n_evals", "k",
                     "n_tasks", "S_base", "C_base", "S_per_eval", "max_abs_diff")
_EXPLORATION_KEYS = ("sigma", "untried", "m_draft", "reserved_active")
_PRUNE_KEYS = ("component", "recent_best_gain", "accepted_edits_in_incumbent")
_ACCEPTED_KEYS = ("t", "edit_id", "hypothesis", "delta_S")
_EVAL_KEYS = ("job", "k", "S", "C", "n_expected", "missing", "extra", "per_task")
_TASK_KEYS = ("rewards", "weights", "tokens", "missing", "extra")
_BRIEF_KEYS = ("S", "C", "missing", "n_expected", "valid_rate", "off_support_calls", "sources")
_JUDGED_KEYS = ("records", "scoreboard", "gain", "winner", "learned")
_LEARNED_KEYS = ("world_id", "lesson", "checks")


def _math(path: str, parse: Callable[[Mapping[str, Any]], _T], d: Mapping[str, Any]) -> _T:
    """A formula value type read with its own ``from_json``; its check failures name ``path``."""
    try:
        return parse(d)
    except (InvalidInput, TypeError, ValueError) as exc:
        raise StoredDataError(f"{path}: {safe_text(exc, 200)}") from None


def _closed_obj(path: str, x: object, keys: Sequence[str]) -> Mapping[str, Any]:
    d = f.obj(path, x)
    f.closed(path, d, keys)
    return d


def _required(path: str, d: Mapping[str, Any], key: str) -> Any:
    if key not in d:
        raise StoredDataError(f"{path}: missing key {key!r}")
    return d[key]


def read_eval(path: str, x: object) -> EvalResult:
    """An :class:`EvalResult` JSON object (closed, per task too)."""
    d = _closed_obj(path, x, _EVAL_KEYS)
    per_task = f.obj(f.sub(path, "per_task"), _required(path, d, "per_task"))
    for world, task in per_task.items():
        _closed_obj(f.sub(f.sub(path, "per_task"), world), task, _TASK_KEYS)
    return _math(path, EvalResult.from_json, d)


@dataclass(frozen=True)
class IncumbentBrief:
    """The incumbent's line of the round summary: Ŝ (6 decimals), Ĉ (1 decimal), trial counts, the
    valid rate, off-support calls, and ``sources``: its trials by source (``recorded``, ``cached``,
    ``replay``; docs/consolidation/estimator.md)."""

    S: float
    C: float | None
    missing: int
    n_expected: int
    valid_rate: float | None
    off_support_calls: int
    sources: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, ev: EvalResult, rows: Sequence[Mapping[str, Any]] = ()) -> IncumbentBrief:
        """The brief of the incumbent's evaluation ``ev`` and its trial rows."""
        sources: dict[str, int] = {}
        for r in rows:
            sources[str(r.get("source"))] = sources.get(str(r.get("source")), 0) + 1
        valid = ev.extra.get("valid_rate")
        return cls(
            S=round(ev.S, 6),
            C=None if ev.C is None else round(ev.C, 1),
            missing=ev.missing,
            n_expected=ev.n_expected,
            valid_rate=None if valid is None else float(valid),
            off_support_calls=int(ev.extra.get("off_support_calls", 0)),
            sources=dict(sorted(sources.items())),
        )

    def to_json(self) -> dict[str, Any]:
        return {"S": self.S, "C": self.C, "missing": self.missing, "n_expected": self.n_expected,
                "valid_rate": self.valid_rate, "off_support_calls": self.off_support_calls,
                "sources": dict(self.sources)}

    @classmethod
    def from_json(cls, x: object, path: str) -> IncumbentBrief:
        d = _closed_obj(path, x, _BRIEF_KEYS)
        sources = f.obj(f.sub(path, "sources"), _required(path, d, "sources"))
        return cls(
            S=f.number(f.sub(path, "S"), _required(path, d, "S")),
            C=f.optional_number(f.sub(path, "C"), _required(path, d, "C")),
            missing=f.integer(f.sub(path, "missing"), _required(path, d, "missing"), 0),
            n_expected=f.integer(f.sub(path, "n_expected"), _required(path, d, "n_expected"), 0),
            valid_rate=f.optional_number(f.sub(path, "valid_rate"), _required(path, d, "valid_rate")),
            off_support_calls=f.integer(f.sub(path, "off_support_calls"),
                                        _required(path, d, "off_support_calls"), 0),
            sources={k: f.integer(f.sub(f.sub(path, "sources"), k), n, 0) for k, n in sources.items()},
        )


@dataclass(frozen=True)
class RoundParams:
    """The round's parameters (docs/algorithm/consolidation.md#33-the-run-step-by-step, step 10).

    ``unit`` = 1 / Σ trial weights; ``delta`` = max(calibrated δ, unit); ``S_star`` = ``S_t`` = the
    incumbent's Ŝ; ``b_t`` the edit budget; ``sigma`` the stall flag (0 or 1); ``enabled`` the
    production kinds the incumbent enables (𝒦 order); ``tried`` the kinds tried before round t;
    ``reserved`` the variant indices holding an exploration slot; ``failing`` the worlds of W the
    incumbent fails.
    """

    unit: float
    calibration: Calibration
    delta: float
    S_star: float
    S_t: float
    b_t: int
    sigma: int
    enabled: tuple[str, ...]
    tried: tuple[str, ...]
    exploration: Exploration
    reserved: tuple[int, ...]
    prune: tuple[PruneTarget, ...]
    failing: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "calibration": self.calibration.to_json(),
            "delta": self.delta,
            "S_star": self.S_star,
            "S_t": self.S_t,
            "b_t": self.b_t,
            "sigma": self.sigma,
            "enabled": list(self.enabled),
            "tried": list(self.tried),
            "exploration": self.exploration.to_json(),
            "reserved": list(self.reserved),
            "prune": [pt.to_json() for pt in self.prune],
            "failing": list(self.failing),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], path: str) -> RoundParams:
        """The :data:`PARAM_KEYS` of a round object ``d`` (other keys are the caller's)."""

        def get(key: str) -> Any:
            return _required(path, d, key)

        def at(key: str) -> str:
            return f.sub(path, key)

        sigma = f.integer(at("sigma"), get("sigma"))
        if sigma not in (0, 1):
            raise StoredDataError(f"{at('sigma')}: must be 0 or 1, got {sigma}")
        prune = []
        for i, pt in enumerate(f.json_objects(at("prune"), get("prune"))):
            where = f.sub(at("prune"), i)
            _closed_obj(where, pt, _PRUNE_KEYS)
            for j, acc in enumerate(f.json_objects(f.sub(where, "accepted_edits_in_incumbent"),
                                                   pt.get("accepted_edits_in_incumbent") or [])):
                _closed_obj(f.sub(f.sub(where, "accepted_edits_in_incumbent"), j), acc, _ACCEPTED_KEYS)
            prune.append(_math(where, PruneTarget.from_json, pt))
        return cls(
            unit=f.number(at("unit"), get("unit")),
            calibration=_math(at("calibration"), Calibration.from_json,
                              _closed_obj(at("calibration"), get("calibration"), _CALIBRATION_KEYS)),
            delta=f.number(at("delta"), get("delta")),
            S_star=f.number(at("S_star"), get("S_star")),
            S_t=f.number(at("S_t"), get("S_t")),
            b_t=f.integer(at("b_t"), get("b_t"), 0),
            sigma=sigma,
            enabled=tuple(f.texts(at("enabled"), get("enabled"))),
            tried=tuple(f.texts(at("tried"), get("tried"))),
            exploration=_math(at("exploration"), Exploration.from_json,
                              _closed_obj(at("exploration"), get("exploration"), _EXPLORATION_KEYS)),
            reserved=tuple(f.integer(f.sub(at("reserved"), i), r, 0)
                           for i, r in enumerate(f.json_array(at("reserved"), get("reserved")))),
            prune=tuple(prune),
            failing=tuple(f.texts(at("failing"), get("failing"))),
        )


@dataclass(frozen=True)
class Learned:
    """A lesson the winner learned: a world of W whose criteria it fixed
    (docs/consolidation/regression.md); ``checks`` are that world's criteria."""

    world_id: str
    lesson: str
    checks: tuple[Mapping[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"world_id": self.world_id, "lesson": self.lesson, "checks": [dict(c) for c in self.checks]}

    @classmethod
    def from_json(cls, x: object, path: str) -> Learned:
        d = _closed_obj(path, x, _LEARNED_KEYS)
        return cls(
            world_id=f.text(f.sub(path, "world_id"), _required(path, d, "world_id")),
            lesson=f.text(f.sub(path, "lesson"), _required(path, d, "lesson")),
            checks=tuple(f.json_objects(f.sub(path, "checks"), _required(path, d, "checks"))),
        )


@dataclass(frozen=True)
class Judged:
    """What judging decided (steps 14–17): the history ``records`` and ``scoreboard`` rows the state
    gains (JSON objects of the state's format), the winner's ΔS ``gain`` (0 without a winner), the
    ``winner``'s variant label and the lessons it ``learned``."""

    records: tuple[Mapping[str, Any], ...]
    scoreboard: tuple[Mapping[str, Any], ...]
    gain: float
    winner: str | None
    learned: tuple[Learned, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"records": [dict(r) for r in self.records], "scoreboard": [dict(r) for r in self.scoreboard],
                "gain": self.gain, "winner": self.winner, "learned": [x.to_json() for x in self.learned]}

    @classmethod
    def from_json(cls, x: object, path: str) -> Judged:
        d = _closed_obj(path, x, _JUDGED_KEYS)
        learned = f.json_array(f.sub(path, "learned"), _required(path, d, "learned"))
        return cls(
            records=tuple(f.json_objects(f.sub(path, "records"), _required(path, d, "records"))),
            scoreboard=tuple(f.json_objects(f.sub(path, "scoreboard"), _required(path, d, "scoreboard"))),
            gain=f.number(f.sub(path, "gain"), _required(path, d, "gain")),
            winner=f.optional_text(f.sub(path, "winner"), _required(path, d, "winner")),
            learned=tuple(Learned.from_json(item, f.sub(f.sub(path, "learned"), i))
                          for i, item in enumerate(learned)),
        )


@dataclass(frozen=True)
class Round:
    """``RoundContext.round``: empty until the incumbent is measured, then the stages in order
    (module docstring). ``incumbent`` and ``inc_ev`` are set together; ``params`` needs them,
    ``judged`` needs ``params``."""

    incumbent: IncumbentBrief | None = None
    inc_ev: EvalResult | None = None
    params: RoundParams | None = None
    judged: Judged | None = None

    def __post_init__(self) -> None:
        if (self.incumbent is None) != (self.inc_ev is None):
            raise ValueError("a round has both incumbent and inc_ev, or neither")
        if self.params is not None and self.inc_ev is None:
            raise ValueError("round parameters need the incumbent's evaluation")
        if self.judged is not None and self.params is None:
            raise ValueError("a judged round needs its parameters")

    @property
    def empty(self) -> bool:
        """No stage is set: the incumbent was never measured (e.g. a run recorded while opening).
        A :class:`Round` is always truthy; test this instead."""
        return self.inc_ev is None

    def measured(self) -> tuple[IncumbentBrief, EvalResult]:
        """The incumbent's brief and evaluation; :class:`StoredDataError` when not measured yet."""
        if self.incumbent is None or self.inc_ev is None:
            raise StoredDataError("params.round: the incumbent is not measured yet")
        return self.incumbent, self.inc_ev

    def set_up(self) -> RoundParams:
        """The round's parameters; :class:`StoredDataError` when the round is not set up yet."""
        if self.params is None:
            raise StoredDataError("params.round: the round parameters are not set yet")
        return self.params

    def to_json(self) -> dict[str, Any]:
        """The flat JSON of the module docstring (``{}`` for an empty round)."""
        out: dict[str, Any] = self.params.to_json() if self.params is not None else {}
        if self.incumbent is not None and self.inc_ev is not None:
            out["incumbent"] = self.incumbent.to_json()
            out["inc_ev"] = self.inc_ev.to_json()
        if self.judged is not None:
            out["judged"] = self.judged.to_json()
        return out

    @classmethod
    def from_json(cls, x: object, path: str = "params.round") -> Round:
        """Read a stored round (current version); errors name the field under ``path``."""
        d = _closed_obj(path, x, ROUND_KEYS)
        if not d:
            return cls()
        incumbent = IncumbentBrief.from_json(_required(path, d, "incumbent"), f.sub(path, "incumbent"))
        inc_ev = read_eval(f.sub(path, "inc_ev"), _required(path, d, "inc_ev"))
        staged = any(k in d for k in PARAM_KEYS)
        params = RoundParams.from_json(d, path) if staged or "judged" in d else None
        judged = Judged.from_json(d["judged"], f.sub(path, "judged")) if "judged" in d else None
        return cls(incumbent, inc_ev, params, judged)
