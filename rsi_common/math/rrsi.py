"""RRSI formulas (docs/algorithm/formulas.md §2.1–§2.8, §2.12) and the modes (§1.3, §1.5), as one import
surface.

The implementation is split by subject; this module re-exports all of it so that the documented paths
(``rsi_common.math.rrsi.RRSIParams`` …) hold:

* :mod:`~rsi_common.math.params` — ``RRSIParams``, ``ModeConfig``;
* :mod:`~rsi_common.math.values` and :mod:`~rsi_common.math.reports` — the value types of
  docs/algorithm/formulas.md §2.1;
* :mod:`~rsi_common.math.estimator` — Ŝ, Ĉ, ΔS, ΔC and the edit budget
  (docs/algorithm/formulas.md §2.2, §2.3);
* :mod:`~rsi_common.math.selection` — floor, cost rule, novelty, guards, judge, select_round
  (docs/algorithm/formulas.md §2.4);
* :mod:`~rsi_common.math.history` — tried set, recent yield, prune set (docs/algorithm/formulas.md §2.5);
* :mod:`~rsi_common.math.explore` — stall flag and reserved slots (docs/algorithm/formulas.md §2.6);
* :mod:`~rsi_common.math.tagging` — component-tag normalisation (docs/algorithm/formulas.md §2.7);
* :mod:`~rsi_common.math.attribution` — scoreboard rows (docs/algorithm/formulas.md §2.8);
* :mod:`~rsi_common.math.units` — unit helpers (docs/algorithm/formulas.md §2.12).
"""

from __future__ import annotations

from rsi_common.kinds import K_ENABLED_PRODUCTION, K_STR, KINDS, REQUIRED_KINDS, in_kind_order
from rsi_common.math.attribution import attribute
from rsi_common.math.estimator import (
    aggregate,
    check_edit_cardinality,
    delta_s,
    edit_budget,
    edit_budget_raw,
    relative_cost_change,
    valid_measurement,
)
from rsi_common.math.explore import exploration, exploration_directive, reserved_variants, stall_flag
from rsi_common.math.history import accepted_edits, measured, prune_set, recent_yield, tried
from rsi_common.math.params import MODES, ModeConfig, ModeName, RRSIParams
from rsi_common.math.reports import AcceptedEdit, AttributionRow, Calibration, Exploration, PruneTarget
from rsi_common.math.selection import (
    TIE_RULES,
    Guard,
    accepted_counts,
    combine_guards,
    cost_rule,
    covers,
    edit_records,
    exercised_guard,
    floor_ok,
    judge,
    novelty,
    outcome_of,
    rate_guard,
    select_round,
    update_s_star,
)
from rsi_common.math.tagging import (
    GENERIC_SIGNALS,
    Signals,
    classify_diff,
    has_evidence,
    normalize_component,
    text_only,
)
from rsi_common.math.units import beta1_from_allowance, delta_from_units, ws_from_unit_weight
from rsi_common.math.values import Candidate, Decision, Edit, EditRecord, EvalResult, TaskResult, Token

__all__ = [
    "GENERIC_SIGNALS",
    "KINDS",
    "K_ENABLED_PRODUCTION",
    "K_STR",
    "MODES",
    "REQUIRED_KINDS",
    "TIE_RULES",
    "AcceptedEdit",
    "AttributionRow",
    "Calibration",
    "Candidate",
    "Decision",
    "Edit",
    "EditRecord",
    "EvalResult",
    "Exploration",
    "Guard",
    "ModeConfig",
    "ModeName",
    "PruneTarget",
    "RRSIParams",
    "Signals",
    "TaskResult",
    "Token",
    "accepted_counts",
    "accepted_edits",
    "aggregate",
    "attribute",
    "beta1_from_allowance",
    "check_edit_cardinality",
    "classify_diff",
    "combine_guards",
    "cost_rule",
    "covers",
    "delta_from_units",
    "delta_s",
    "edit_budget",
    "edit_budget_raw",
    "edit_records",
    "exercised_guard",
    "exploration",
    "exploration_directive",
    "floor_ok",
    "has_evidence",
    "in_kind_order",
    "judge",
    "measured",
    "normalize_component",
    "novelty",
    "outcome_of",
    "prune_set",
    "rate_guard",
    "recent_yield",
    "relative_cost_change",
    "reserved_variants",
    "select_round",
    "stall_flag",
    "text_only",
    "tried",
    "update_s_star",
    "valid_measurement",
    "ws_from_unit_weight",
]
