"""Unit conversions for choosing δ, β1 and w_s from counts (docs/algorithm/formulas.md §2.12).

For consolidation the natural unit is one criterion verdict, ``1 / Σw`` (docs/algorithm/formulas.md §2.9).
Examples: 3 passes
of 178 trials → δ = 0.01685; +25 % tokens per extra pass of 178 → β1 = 44.5; 0.1 per criterion of
14,140 → w_s = 1414.
"""

from __future__ import annotations

from rsi_common.errors import InvalidInput
from rsi_common.math import _validate as v

__all__ = ["beta1_from_allowance", "delta_from_units", "ws_from_unit_weight"]


def _units(N: float) -> float:
    n = v.finite("N", N)
    if n <= 0:
        raise InvalidInput(f"N must be > 0, got {N!r}")
    return n


def delta_from_units(n: float, N: float) -> float:
    """δ = n/N: ``n`` passes (units) out of ``N`` (score units per pass = 1/N)."""
    return v.finite("n", n) / _units(N)


def beta1_from_allowance(a: float, N: float) -> float:
    """β1 = a·N: a relative cost allowance ``a`` per unit of 1/N gain."""
    return v.finite("a", a) * _units(N)


def ws_from_unit_weight(w: float, N: float) -> float:
    """w_s = w·N: an in-band weight ``w`` per unit of 1/N gain."""
    return v.finite("w", w) * _units(N)
