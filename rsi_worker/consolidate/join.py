"""The in-band join of a run's fan-outs (docs/operations/failure-recovery.md#in-band-join).

On the cluster a fan-out's next step is started by a Celery chord. A chord's join lives in the
result backend and in messages: a message lost when a worker is killed between Redis handing it
over (``BRPOP``) and the worker writing it to its unacked set — a chord body, the ``celery.accumulate``
of a replaced draft, or a chord's last member — leaves the run ``running`` with all its work stored
and nobody to judge it. The in-band join closes that gap from stored data: after each member of a
fan-out stored its result, :func:`ready_step` tells whether the stored rows complete the fan-out;
the member that sees it complete dispatches the next step itself. The chord still fires too; a step
runs once because each step task takes an execution claim first
(:mod:`rsi_worker.cluster.join`), and the final write is fenced.

Complete means, by the stored rows only (an empty slot — an infrastructure error — is never
complete here; the chord, or the lease expiry and the sweeper, cover that run):

* phase ``incumbent``: every incumbent slot of the stored context has its trial row;
* phase ``drafting`` / ``candidates``: every variant ``A``.. of the round has a stored draft, every
  draft that passed (no gate failure, a payload) has its slots stored in the context, and each of
  those slots has its trial row.

Pure pipeline: no Celery import.
"""

from __future__ import annotations

from typing import Literal

import sqlalchemy as sa

from rsi_common.db import ReplayRow, get_run
from rsi_worker.consolidate.context import Deps, RoundContext

__all__ = ["JoinStep", "ready_step"]

JoinStep = Literal["after_incumbent", "judge_round"]
"""The steps an in-band join may start (the chord bodies of ``flow.TRANSITIONS``)."""


def _stored_slots(session: sa.orm.Session, run_id: str) -> set[tuple[str, str, int]]:
    rows = session.execute(
        sa.select(ReplayRow.candidate, ReplayRow.world_id, ReplayRow.trial).where(ReplayRow.run_id == run_id))
    return {(str(c), str(w), int(t)) for c, w, t in rows}


def _slot_keys(slots: list[dict[str, object]], candidate: str) -> set[tuple[str, str, int]]:
    return {(candidate, str(s["world_id"]), int(str(s["trial"]))) for s in slots}


def ready_step(deps: Deps, run_id: str) -> JoinStep | None:
    """The step whose fan-out the stored rows of ``run_id`` complete (module docstring), or None
    (the run is closed, or a member is still to store)."""
    with deps.sessions() as session:
        # a read: deferred on SQLite, so it never takes the write turn a host's record_turn waits
        # for (docs/performance/record-path.md#the-loadtest-tail)
        session.connection(execution_options={"sqlite_begin": "DEFERRED"})
        run = get_run(session, run_id)
        if str(run.status) != "running":
            session.commit()
            return None
        ctx = RoundContext.from_json(run.params or {})
        drafts = dict(run.drafts or {})
        if ctx.phase == "incumbent":
            needed = _slot_keys(ctx.slots.get("incumbent", []), "incumbent")
            step: JoinStep = "after_incumbent"
        elif ctx.phase in ("drafting", "candidates"):
            variants = "ABCDEFGH"[: deps.params.m]
            if any(v not in drafts for v in variants):
                session.commit()
                return None
            needed = set()
            for v in variants:
                draft = drafts[v] or {}
                if draft.get("gate") is not None or not draft.get("payload"):
                    continue
                if v not in ctx.slots:
                    session.commit()
                    return None  # passed, its trials not launched yet (or never: the chord decides)
                needed |= _slot_keys(ctx.slots[v], v)
            step = "judge_round"
        else:
            session.commit()
            return None
        stored = _stored_slots(session, run_id) if needed else set()
        session.commit()
    return step if needed <= stored else None
