"""RRSI value types of evaluation and selection (docs/algorithm/formulas.md §2.1): trials, evaluations,
edits, candidates,
decisions and history rows — small frozen dataclasses with ``to_json`` / ``from_json``.

Conventions shared by every type here:

* Construction validates; bad input raises :class:`~rsi_common.errors.InvalidInput` (a ``ValueError``).
* Sequences are stored as tuples and mappings as read-only ``dict`` copies, so a value cannot change
  after construction (nested JSON inside ``extra`` / ``payload`` is the caller's to leave alone).
  The copies survive ``copy.deepcopy``, ``dataclasses.asdict`` and ``json.dumps``.
* ``to_json`` returns plain JSON types (``dict``, ``list``, ``str``, numbers, ``None``) in the key
  order docs/algorithm/README.md gives; ``from_json(to_json(x)) == x``. ``from_json`` ignores unknown keys
  (forward
  compatibility, project decision) and raises on a missing key that has no default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rsi_common.errors import InvalidInput
from rsi_common.math import _validate as v

__all__ = [
    "Candidate",
    "Decision",
    "Edit",
    "EditRecord",
    "EvalResult",
    "TaskResult",
    "Token",
]

Token = int | float | None
"""A trial's token count: a number, or ``None`` when unknown (missing trials)."""


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


def _ids(name: str, xs: object) -> tuple[str | int, ...]:
    out = tuple(v.sequence(name, xs))
    for i, x in enumerate(out):
        if isinstance(x, bool) or not isinstance(x, (str, int)):
            raise InvalidInput(f"{name}[{i}] must be a task id (string or integer), got {x!r}")
    return out


@dataclass(frozen=True)
class TaskResult:
    """The trials of one task (world) x: one entry per trial.

    Rewards lie in [0, 1]; a missing trial is present as reward 0.0 with its full weight and is
    counted in ``missing`` (so ``missing ≤ len(rewards)``). Empty ``weights`` ⇒ every weight 1.0;
    empty ``tokens`` ⇒ every token count unknown. Weights are finite and ≥ 0. Tokens are numbers or
    ``None``; non-positive numbers and bools are allowed here but never enter Ĉ
    (docs/algorithm/formulas.md §2.2); NaN is an error.
    """

    rewards: tuple[float, ...]
    weights: tuple[float, ...] = ()
    tokens: tuple[Token, ...] = ()
    missing: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rewards = tuple(v.unit_interval(f"rewards[{i}]", r)
                        for i, r in enumerate(v.sequence("rewards", self.rewards)))
        weights = tuple(v.non_negative(f"weights[{i}]", w)
                        for i, w in enumerate(v.sequence("weights", self.weights)))
        tokens = tuple(v.sequence("tokens", self.tokens))
        for i, tok in enumerate(tokens):
            if tok is not None:
                v.number(f"tokens[{i}]", 1 if isinstance(tok, bool) else tok)
        for name, seq in (("weights", weights), ("tokens", tokens)):
            if seq and len(seq) != len(rewards):
                raise InvalidInput(f"{name} has {len(seq)} entries but rewards has {len(rewards)}")
        v.integer("missing", self.missing, 0)
        if self.missing > len(rewards):
            raise InvalidInput(f"missing ({self.missing}) exceeds the number of trials ({len(rewards)})")
        _set(self, "rewards", rewards)
        _set(self, "weights", weights)
        _set(self, "tokens", tokens)
        _set(self, "extra", v.frozen_map("extra", self.extra))

    @property
    def n(self) -> int:
        """Number of trials."""
        return len(self.rewards)

    def weight_list(self) -> tuple[float, ...]:
        """The weights with the empty-list default expanded (1.0 per trial)."""
        return self.weights if self.weights else (1.0,) * len(self.rewards)

    def token_list(self) -> tuple[Token, ...]:
        """The tokens with the empty-list default expanded (``None`` per trial)."""
        return self.tokens if self.tokens else (None,) * len(self.rewards)

    @property
    def mean(self) -> float:
        """Σw·r / Σw over the trials (0.0 if Σw = 0), summed in trial order."""
        num = 0.0
        den = 0.0
        for r, w in zip(self.rewards, self.weight_list(), strict=True):
            num += r * w
            den += w
        return num / den if den else 0.0

    def to_json(self) -> dict[str, Any]:
        """Keys ``rewards, weights, tokens, missing, extra``."""
        return {
            "rewards": list(self.rewards),
            "weights": list(self.weights),
            "tokens": list(self.tokens),
            "missing": self.missing,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TaskResult:
        """Inverse of :meth:`to_json`; only ``rewards`` is required."""
        d = v.mapping("TaskResult", d)
        return cls(
            rewards=tuple(v.sequence("rewards", v.required(d, "rewards", "TaskResult"))),
            weights=tuple(v.sequence("weights", d.get("weights") or [])),
            tokens=tuple(v.sequence("tokens", d.get("tokens") or [])),
            missing=d.get("missing", 0),
            extra=d.get("extra") or {},
        )


@dataclass(frozen=True)
class EvalResult:
    """One evaluation of one harness: per-task trials and the aggregate Ŝ, Ĉ
    (docs/algorithm/formulas.md §2.2).

    ``per_task`` maps task id → :class:`TaskResult`; its insertion order is significant (it drives the
    bootstrap, docs/algorithm/formulas.md §2.9). ``S`` ∈ [0, 1] is the weighted mean reward (an early-stopped
    candidate carries
    its upper bound Ŝ_max here, docs/algorithm/formulas.md §2.10.5); ``C`` is the mean positive token count
    or ``None``.
    ``k`` (trials per task) ≥ 1; ``n_expected`` and ``missing`` are trial counts ≥ 0.
    """

    job: str
    k: int
    per_task: Mapping[str, TaskResult]
    S: float
    C: float | None
    n_expected: int
    missing: int
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        v.text("job", self.job)
        v.integer("k", self.k, 1)
        per_task = v.mapping("per_task", self.per_task)
        for key, tr in per_task.items():
            v.text("per_task key", key)
            if not isinstance(tr, TaskResult):
                raise InvalidInput(f"per_task[{key!r}] must be a TaskResult, got {type(tr).__name__}")
        _set(self, "per_task", v.ReadOnlyDict(per_task))
        _set(self, "S", v.unit_interval("S", self.S))
        if self.C is not None:
            _set(self, "C", v.non_negative("C", self.C))
        v.integer("n_expected", self.n_expected, 0)
        v.integer("missing", self.missing, 0)
        _set(self, "extra", v.frozen_map("extra", self.extra))

    def to_json(self) -> dict[str, Any]:
        """Key order ``job, k, S, C, n_expected, missing, extra, per_task``."""
        return {
            "job": self.job,
            "k": self.k,
            "S": self.S,
            "C": self.C,
            "n_expected": self.n_expected,
            "missing": self.missing,
            "extra": dict(self.extra),
            "per_task": {x: tr.to_json() for x, tr in self.per_task.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EvalResult:
        """Inverse of :meth:`to_json` (``per_task`` order preserved); ``extra`` may be absent."""
        d = v.mapping("EvalResult", d)
        what = "EvalResult"
        per_task = v.mapping("per_task", v.required(d, "per_task", what))
        return cls(
            job=v.required(d, "job", what),
            k=v.required(d, "k", what),
            per_task={str(x): TaskResult.from_json(tr) for x, tr in per_task.items()},
            S=v.required(d, "S", what),
            C=d.get("C"),
            n_expected=v.required(d, "n_expected", what),
            missing=v.required(d, "missing", what),
            extra=d.get("extra") or {},
        )


_EDIT_OPTIONAL = ("why_not_lower_lever", "trigger_condition", "regression_risk", "mechanism",
                  "declared_component")


@dataclass(frozen=True)
class Edit:
    """One declared edit of a candidate (docs/algorithm/formulas.md §2.1, §6.1).

    ``component`` is the kind tag (after tagging, the normalised one; ``declared_component`` keeps
    what the proposer declared). ``predicted_affected`` lists task/world ids (strings, or integers
    for suites with integer ids). Optional text fields are ``None`` when absent and are then left
    out of :meth:`to_json`; ``addresses`` is left out when empty.
    """

    id: str
    component: str | None = None
    hypothesis: str | None = None
    targets_mode: str | None = None
    predicted_affected: tuple[str | int, ...] = ()
    retroactive_check: str | None = None
    addresses: tuple[str, ...] = ()
    why_not_lower_lever: str | None = None
    trigger_condition: str | None = None
    regression_risk: str | None = None
    mechanism: str | None = None
    declared_component: str | None = None

    def __post_init__(self) -> None:
        v.text("id", self.id)
        for name in ("component", "hypothesis", "targets_mode", "retroactive_check", *_EDIT_OPTIONAL):
            v.optional_text(name, getattr(self, name))
        _set(self, "predicted_affected", _ids("predicted_affected", self.predicted_affected))
        _set(self, "addresses", v.strings("addresses", self.addresses))

    def to_json(self) -> dict[str, Any]:
        """Required keys always; ``addresses`` and the optional texts only when set."""
        out: dict[str, Any] = {
            "id": self.id,
            "component": self.component,
            "hypothesis": self.hypothesis,
            "targets_mode": self.targets_mode,
            "predicted_affected": list(self.predicted_affected),
            "retroactive_check": self.retroactive_check,
        }
        if self.addresses:
            out["addresses"] = list(self.addresses)
        for name in _EDIT_OPTIONAL:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Edit:
        """Inverse of :meth:`to_json`; only ``id`` is required."""
        d = v.mapping("Edit", d)
        return cls(
            id=v.required(d, "id", "Edit"),
            component=d.get("component"),
            hypothesis=d.get("hypothesis"),
            targets_mode=d.get("targets_mode"),
            predicted_affected=tuple(v.sequence("predicted_affected", d.get("predicted_affected") or [])),
            retroactive_check=d.get("retroactive_check"),
            addresses=tuple(v.sequence("addresses", d.get("addresses") or [])),
            **{name: d.get(name) for name in _EDIT_OPTIONAL},
        )


@dataclass(frozen=True)
class EditRecord:
    """One history row 𝓛 (RRSI Eq.10): one declared edit of one candidate of round ``t``.

    ``delta_S`` is ``None`` for gate outcomes (unmeasured). ``t`` may be ``None`` only for legacy rows
    read back from storage (docs/algorithm/consolidation.md §3.2 keeps rows without ``t``).
    """

    t: int | None
    variant: str
    edit_id: str | None
    component: str | None
    hypothesis: str | None
    delta_S: float | None
    delta_C: float | None
    accepted: bool
    outcome: str
    S: float | None = None
    C: float | None = None
    bundle: int = 1
    detail: str = ""
    targets_mode: str | None = None
    predicted_affected: tuple[str | int, ...] = ()
    early_stopped: bool = False

    def __post_init__(self) -> None:
        v.optional_integer("t", self.t)
        v.text("variant", self.variant)
        for name in ("edit_id", "component", "hypothesis", "targets_mode"):
            v.optional_text(name, getattr(self, name))
        for name in ("delta_S", "delta_C", "S", "C"):
            v.optional_number(name, getattr(self, name))
        if not isinstance(self.accepted, bool) or not isinstance(self.early_stopped, bool):
            raise InvalidInput("accepted and early_stopped must be booleans")
        v.text("outcome", self.outcome)
        v.integer("bundle", self.bundle, 0)
        v.text("detail", self.detail)
        _set(self, "predicted_affected", _ids("predicted_affected", self.predicted_affected))

    def to_json(self) -> dict[str, Any]:
        """Key order ``t, variant, edit_id, component, hypothesis, targets_mode, predicted_affected,
        delta_S, delta_C, accepted, outcome, S, C, bundle, detail, early_stopped``."""
        return {
            "t": self.t,
            "variant": self.variant,
            "edit_id": self.edit_id,
            "component": self.component,
            "hypothesis": self.hypothesis,
            "targets_mode": self.targets_mode,
            "predicted_affected": list(self.predicted_affected),
            "delta_S": self.delta_S,
            "delta_C": self.delta_C,
            "accepted": self.accepted,
            "outcome": self.outcome,
            "S": self.S,
            "C": self.C,
            "bundle": self.bundle,
            "detail": self.detail,
            "early_stopped": self.early_stopped,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EditRecord:
        """Tolerant reader (docs/algorithm/formulas.md §2.1): every key may be missing.

        ``variant`` / ``outcome`` default to ``""``, ``bundle = int(d.get("bundle") or 0)``,
        ``accepted = bool(d.get("accepted"))``, ``early_stopped = bool(...)``, ``detail`` ``""``,
        others ``None`` / empty. Extra storage keys (``diff``, ``ts``, ``addresses`` …) are ignored.
        """
        d = v.mapping("EditRecord", d)
        return cls(
            t=d.get("t"),
            variant=d.get("variant") or "",
            edit_id=d.get("edit_id"),
            component=d.get("component"),
            hypothesis=d.get("hypothesis"),
            delta_S=d.get("delta_S"),
            delta_C=d.get("delta_C"),
            accepted=bool(d.get("accepted")),
            outcome=d.get("outcome") or "",
            S=d.get("S"),
            C=d.get("C"),
            bundle=int(d.get("bundle") or 0),
            detail=d.get("detail") or "",
            targets_mode=d.get("targets_mode"),
            predicted_affected=tuple(v.sequence("predicted_affected", d.get("predicted_affected") or [])),
            early_stopped=bool(d.get("early_stopped")),
        )


@dataclass(frozen=True, eq=False)
class Candidate:
    """One candidate of a round: its declared edits and, when measured, its evaluation.

    ``ev is None`` ⇔ unmeasured; then ``gate_failure`` names the gate (``critic_reject``,
    ``smoke_fail``, ``eval_invalid``, ``no_proposal``) or is ``None`` (``not_evaluated``).
    Equality is identity (``outcome_of`` asks "is this the winner"); compare ``to_json()`` for value
    equality.
    """

    variant: str
    edits: tuple[Edit, ...] = ()
    ev: EvalResult | None = None
    gate_failure: str | None = None
    detail: str = ""
    payload: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        v.text("variant", self.variant)
        edits = tuple(v.sequence("edits", self.edits))
        for i, e in enumerate(edits):
            if not isinstance(e, Edit):
                raise InvalidInput(f"edits[{i}] must be an Edit, got {type(e).__name__}")
        _set(self, "edits", edits)
        if self.ev is not None and not isinstance(self.ev, EvalResult):
            raise InvalidInput(f"ev must be an EvalResult or None, got {type(self.ev).__name__}")
        v.optional_text("gate_failure", self.gate_failure)
        v.text("detail", self.detail)
        if self.payload is not None:
            _set(self, "payload", v.frozen_map("payload", self.payload))

    @property
    def components(self) -> list[str]:
        """The non-empty component tags of the edits, as strings, duplicates kept."""
        return [str(e.component) for e in self.edits if e.component]

    def to_json(self) -> dict[str, Any]:
        """Keys ``variant, edits, ev, gate_failure, detail, payload``."""
        return {
            "variant": self.variant,
            "edits": [e.to_json() for e in self.edits],
            "ev": None if self.ev is None else self.ev.to_json(),
            "gate_failure": self.gate_failure,
            "detail": self.detail,
            "payload": None if self.payload is None else dict(self.payload),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Candidate:
        """Inverse of :meth:`to_json`; only ``variant`` is required."""
        d = v.mapping("Candidate", d)
        ev = d.get("ev")
        return cls(
            variant=v.required(d, "variant", "Candidate"),
            edits=tuple(Edit.from_json(e) for e in v.sequence("edits", d.get("edits") or [])),
            ev=None if ev is None else EvalResult.from_json(ev),
            gate_failure=d.get("gate_failure"),
            detail=d.get("detail") or "",
            payload=d.get("payload"),
        )


@dataclass(frozen=True)
class Decision:
    """The judgement of one candidate (docs/algorithm/formulas.md §2.4 ``judge``).

    ``reason_code`` ∈ {a gate code, ``not_evaluated``, ``floor``, ``cost_rule``, ``guard``,
    ``admissible``}. Numeric fields are ``None`` for unmeasured candidates. ``guards`` holds the
    guard violations that were passed in (possibly non-empty even when an earlier rule failed).
    """

    variant: str
    admissible: bool
    reason: str
    reason_code: str
    S: float | None = None
    C: float | None = None
    delta_S: float | None = None
    delta_C: float | None = None
    novelty: int | None = None
    guards: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        v.text("variant", self.variant)
        if not isinstance(self.admissible, bool):
            raise InvalidInput("admissible must be a boolean")
        v.text("reason", self.reason)
        v.text("reason_code", self.reason_code)
        for name in ("S", "C", "delta_S", "delta_C"):
            v.optional_number(name, getattr(self, name))
        v.optional_integer("novelty", self.novelty, 0)
        _set(self, "guards", v.strings("guards", self.guards))

    def to_json(self) -> dict[str, Any]:
        """Keys in field order."""
        return {
            "variant": self.variant,
            "admissible": self.admissible,
            "reason": self.reason,
            "reason_code": self.reason_code,
            "S": self.S,
            "C": self.C,
            "delta_S": self.delta_S,
            "delta_C": self.delta_C,
            "novelty": self.novelty,
            "guards": list(self.guards),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Decision:
        """Inverse of :meth:`to_json`; ``variant, admissible, reason, reason_code`` are required."""
        d = v.mapping("Decision", d)
        what = "Decision"
        return cls(
            variant=v.required(d, "variant", what),
            admissible=v.required(d, "admissible", what),
            reason=v.required(d, "reason", what),
            reason_code=v.required(d, "reason_code", what),
            S=d.get("S"),
            C=d.get("C"),
            delta_S=d.get("delta_S"),
            delta_C=d.get("delta_C"),
            novelty=d.get("novelty"),
            guards=tuple(v.sequence("guards", d.get("guards") or [])),
        )
