"""Regression worlds: what an agent learned is replayed in every later round, and a candidate that
undoes it is rejected (docs/consolidation/regression.md).

* **Learning** (:func:`lessons_learned`): when a run adopts, each evaluation world whose criteria
  the incumbent failed and the winner meets on every trial becomes a lesson — a copy of the world and
  the checks it was fixed on, named by the analyst's failure modes that explain it (else by the
  failing criteria's names), stored with the adoption (``rsi_regressions``).
* **Replaying** (:func:`add_lessons`): a round appends the active lessons of its start version (the
  version's own and its ancestors') to W after the selected worlds, with their stored checks, for the
  incumbent and every candidate. They are trials like any other: they count in S, in the early-stop
  bound, in the cost and in the run record.
* **Guarding** (:func:`regression_guard`): a candidate that fails a lesson's world the incumbent
  passes is rejected, naming the lesson and the run that learned it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from rsi_common.db import RegressionRow, active_regressions, touch_regressions
from rsi_common.math import EvalResult
from rsi_common.world import TurnWorld
from rsi_worker.consolidate.round import Learned

__all__ = ["FAIL_BELOW", "add_lessons", "lesson_world", "lessons_learned", "regression_guard"]

FAIL_BELOW = 1.0 - 1e-9
"""A world's mean below this fails (the same threshold as "failing" in a round)."""


def lesson_world(row: RegressionRow) -> TurnWorld:
    """The stored copy of a lesson's world."""
    return TurnWorld(row.world_id, dict(row.world), dict(row.signals or {}), row.interaction_id, row.seq)


def add_lessons(session: Session, agent_id: str, version: str | None, chosen: Sequence[str],
                bound: int, used: list[str] | None = None
                ) -> tuple[list[TurnWorld], dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """The active lessons of ``version`` to replay this round (at most ``bound``, most recent first).

    Returns:
        ``(worlds to append to W, their checks, the lesson briefs)``; a lesson whose world is already
        in ``chosen`` is replayed there with the world's current checks (it is not added twice), but
        its brief is kept so the guard still protects it. The lessons are marked used — now, or, when
        ``used`` is given, by the caller: their ids are appended to it (a read transaction then
        stays a read; the caller marks them in its write transaction, ``touch_regressions``).
    """
    rows = active_regressions(session, agent_id, version)[-bound:] if bound > 0 else []
    if used is None:
        touch_regressions(session, [r.id for r in rows])
    else:
        used.extend(r.id for r in rows)
    extra = [r for r in rows if r.world_id not in chosen]
    briefs = [{"world_id": r.world_id, "lesson": r.lesson, "run_id": r.run_id, "version": r.version}
              for r in rows]
    return [lesson_world(r) for r in extra], {r.world_id: list(r.checks) for r in extra}, briefs


def _lesson(world_id: str, checks: Sequence[Mapping[str, Any]], analysis: Mapping[str, Any]) -> str:
    modes = [str(m.get("mode")) for m in analysis.get("failure_modes") or ()
             if isinstance(m, Mapping) and world_id in (m.get("worlds") or ())]
    if modes:
        return ", ".join(modes)
    return ", ".join(str(c.get("name")) for c in checks) or "criteria met"


def lessons_learned(worlds: Sequence[str], checks: Mapping[str, Sequence[Mapping[str, Any]]],
                    inc_ev: EvalResult, winner_ev: EvalResult, analysis: Mapping[str, Any],
                    known: Sequence[str] = ()) -> list[Learned]:
    """The worlds of W whose criteria the winner fixed, as :class:`Learned` lessons.

    Args:
        worlds: W in order. known: world ids that are lessons already (not learned twice).
    """
    out: list[Learned] = []
    for w in worlds:
        inc, cand = inc_ev.per_task.get(w), winner_ev.per_task.get(w)
        if w in known or inc is None or cand is None or not checks.get(w):
            continue
        if inc.mean < FAIL_BELOW <= cand.mean:
            out.append(Learned(w, _lesson(w, checks[w], analysis), tuple(checks[w])))
    return out


def regression_guard(lessons: Sequence[Mapping[str, Any]]) -> Callable[[EvalResult, EvalResult], list[str]]:
    """A guard (``select_round``'s ``guard_fn``): one violation per lesson whose world the incumbent
    passes and the candidate fails."""

    def guard(inc_ev: EvalResult, cand_ev: EvalResult) -> list[str]:
        out = []
        for lesson in lessons:
            w = lesson["world_id"]
            inc, cand = inc_ev.per_task.get(w), cand_ev.per_task.get(w)
            if inc is not None and cand is not None and inc.mean >= FAIL_BELOW > cand.mean:
                out.append(f"regression: fails the lesson '{lesson['lesson']}' learned in run "
                           f"{lesson['run_id']} (world {w})")
        return out

    return guard
