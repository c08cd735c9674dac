"""A refine run inside the consolidation pipeline (docs/runtime/refine.md#run).

A run whose lease io starts ``refine:`` is a refine: kind ``refine``, its request
(``{id, focus, criteria, requested_by}``) in ``params.refine``. It differs from §3 in three places:

* it never takes the quiet path, and a round opens when any scored world exists or operator
  criteria exist (not only on a fresh negative signal);
* operator criteria become checks ``operator_<i>`` on the latest ``n_eval`` untainted, replayable
  worlds (tainted worlds are never loaded);
* the focus reaches the analyst and the proposer as ``FOCUS (from <requester>; a direction, not a
  criterion): <focus>``.

Everything else — the incumbent's replays, the gate, RRSI selection — is the normal round, so a
refine with no failing world ends ``kept``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from rsi_common.runtime.refine import KIND_REFINE, REFINE_IO_PREFIX, load_request

__all__ = ["focus_line", "is_refine_io", "operator_checks", "refine_of", "run_kind"]


def is_refine_io(io: str | None) -> bool:
    """The lease io of a refine run."""
    return bool(io) and str(io).startswith(REFINE_IO_PREFIX)


def run_kind(io: str | None, kind: str) -> str:
    """``refine`` for a refine io, else ``kind``."""
    return KIND_REFINE if is_refine_io(io) else kind


def refine_of(session: Session, agent: str, io: str | None) -> dict[str, Any]:
    """The stored request of a refine io (``{}`` when ``io`` is not one); a request that is not
    stored any more reads as ``{"id": ..., "missing": True}`` (the run then records nothing)."""
    if not is_refine_io(io):
        return {}
    req = load_request(session, agent, io)
    if req is None:
        return {"id": str(io)[len(REFINE_IO_PREFIX):], "focus": "", "criteria": [], "requested_by": "",
                "missing": True}
    return req.to_json()


def focus_line(refine: Mapping[str, Any]) -> str:
    """The focus as the analyst and proposer read it (``""`` without one)."""
    focus = str(refine.get("focus") or "").strip()
    if not focus:
        return ""
    who = str(refine.get("requested_by") or "operator")
    return f"FOCUS (from {who}; a direction, not a criterion): {focus}"


def operator_checks(refine: Mapping[str, Any], worlds: Sequence[Any],
                    n_eval: int) -> dict[str, list[dict[str, Any]]]:
    """World id → the ``operator_<i>`` checks, on the latest ``n_eval`` replayable worlds of
    ``worlds`` (newest first, untainted: the pool never loads a tainted one)."""
    criteria = [str(c) for c in refine.get("criteria") or [] if str(c).strip()]
    if not criteria:
        return {}
    latest = sorted((w for w in worlds if w.replayable), key=lambda w: (w.clock, w.seq), reverse=True)
    checks = [{"kind": "answer_criteria", "name": f"operator_{i}", "criterion": c}
              for i, c in enumerate(criteria, start=1)]
    return {w.id: [dict(c) for c in checks] for w in latest[: max(1, n_eval)]}
