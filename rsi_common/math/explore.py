"""Stall-driven exploration of untried kinds (RRSI Eq.13; docs/algorithm/formulas.md §2.6)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rsi_common.errors import InvalidInput
from rsi_common.kinds import KINDS
from rsi_common.math import _validate as v
from rsi_common.math.reports import Exploration

__all__ = ["exploration", "exploration_directive", "reserved_variants", "stall_flag"]


def stall_flag(traj: Sequence[float], t: int, w: int, delta: float) -> int:
    """σ_t: 1 when the score moved by at most δ over the last ``w`` rounds, else 0.

    0 if ``t < w``, ``t ≥ len(traj)`` or ``t − w < 0``; otherwise ``int(traj[t] − traj[t−w] ≤ δ)``.
    ``traj[t]`` is the score of H_t (a rejected round repeats the incumbent score).

    Raises:
        InvalidInput: ``w < 0`` or δ NaN.
    """
    v.integer("t", t)
    v.integer("w", w, 0)
    delta = v.number("delta", delta)
    if t < w or t >= len(traj) or t - w < 0:
        return 0
    return int(v.finite("traj[t]", traj[t]) - v.finite("traj[t-w]", traj[t - w]) <= delta)


def exploration(stall: int, tried: Iterable[str], m_draft: int, *, enabled: Sequence[str]) -> Exploration:
    """``Exploration(σ = stall, 𝒰_t, m_draft)`` with 𝒰_t = enabled kinds not tried, in 𝒦 order."""
    done = set(tried)
    untried = tuple(k for k in KINDS if k in enabled and k not in done)
    return Exploration(sigma=stall, untried=untried, m_draft=m_draft)


def reserved_variants(m: int, m_draft: int, stall: int, untried: Sequence[str]) -> frozenset[int]:
    """Variant indices holding a reserved exploration slot: the last ``m_draft`` of ``0..m−1``.

    Empty unless ``stall == 1`` and ``untried`` is non-empty.

    Raises:
        InvalidInput: ``m < 1`` or not ``0 ≤ m_draft ≤ m`` (as in RRSIParams).
    """
    v.integer("m", m, 1)
    v.integer("m_draft", m_draft, 0)
    if m_draft > m:
        raise InvalidInput(f"m_draft ({m_draft}) must not exceed m ({m})")
    if stall != 1 or not untried:
        return frozenset()
    return frozenset(i for i in range(m) if i >= m - m_draft)


def exploration_directive(expl: Exploration, *, w: int | None = None,
                          delta: float | None = None) -> dict[str, Any]:
    """The proposer's exploration directive ``{sigma, untried, m_draft, text}``.

    Three cases: stall with untried kinds (``STALL`` … ``RESERVED``), untried kinds without a stall
    (optional), nothing untried. ``w`` and ``delta`` only make the stall sentence concrete.
    """
    kinds = ", ".join(expl.untried)
    if expl.reserved_active:
        window = f"the last {w} rounds" if w is not None else "the stall window"
        band = f"the noise band delta {delta:.4f}" if delta is not None else "the noise band delta"
        text = (f"STALL: progress over {window} is within {band}. {expl.m_draft} slot(s) are RESERVED "
                f"for never-exercised kinds [{kinds}]; a variant holding a reserved slot must put at least "
                "one edit on one of them.")
    elif expl.untried:
        text = f"Kinds not yet exercised: [{kinds}]; trying them is optional this round."
    else:
        text = "Every enabled kind has been exercised."
    return {"sigma": expl.sigma, "untried": list(expl.untried), "m_draft": expl.m_draft, "text": text}
