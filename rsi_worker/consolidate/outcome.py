"""What one step of a run decided (:class:`Next`): the vocabulary the steps and the run's state
machine (:mod:`rsi_worker.consolidate.flow`) share. What follows an outcome is the machine's
business (``flow.TRANSITIONS``), never a step's."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from rsi_worker.consolidate.context import RoundContext
from rsi_worker.consolidate.evaluate import TrialSlot
from rsi_worker.consolidate.result import ConsolidationResult, Status

__all__ = ["Next", "NextKind", "final"]

NextKind = Literal["final", "trials", "drafts", "stop"]
"""``final``: the run's result is decided; ``trials`` / ``drafts``: a fan-out to run; ``stop``:
nothing to do (a redelivered step of a closed run)."""


@dataclass
class Next:
    """What a step decided: a final result, or the trials / drafts to run next."""

    kind: NextKind
    ctx: RoundContext
    slots: list[TrialSlot] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    result: ConsolidationResult | None = None
    quiet: object | None = None
    """A ``final`` decided by the no-signal fast path (``consolidate.quiet.QuietRun``): its run row is
    not written yet, ``flow.close`` writes it in one transaction."""


def final(ctx: RoundContext, status: Status, reason: str, t0: float) -> Next:
    """A result without a round (``t0``: ``time.monotonic()`` at the step's start); the state it saves
    is built by ``finalize`` from the stored one."""
    result = ConsolidationResult(
        status=status,
        reason=reason,
        start_version=ctx.start_version,
        version=ctx.start_version,
        signals=dict(ctx.signals_read),
        seconds=time.monotonic() - t0,
        usage=ctx.usage,
        run_id=ctx.run_id,
    )
    return Next("final", ctx, result=result)
