"""Turn consolidation (SPEC §3) as plain functions.

Each step loads its inputs from SQL, computes, and stores what the next step needs; the Celery
tasks (``rsi_worker.cluster.tasks``) and the in-process driver (:func:`consolidate_inline`) call the same
steps: :func:`open_run` → :func:`run_trial` (incumbent) → :func:`after_incumbent` →
:func:`draft_step` → :func:`launch_candidate` (per variant, as soon as its draft passed;
both in :func:`draft_and_launch`) → :func:`run_trial` (candidates) → :func:`judge_round` →
:func:`finalize`.
"""

from __future__ import annotations

from rsi_common.config import ConsolidationParams
from rsi_worker.consolidate.context import CountingClient, Deps, ModelFactory, RoundContext, default_models
from rsi_worker.consolidate.drafting import draft_and_launch, draft_step, launch_candidate
from rsi_worker.consolidate.finalize import build_state, finalize, interrupt
from rsi_worker.consolidate.incumbent import after_incumbent
from rsi_worker.consolidate.inline import (
    SerialExecutor,
    ThreadExecutor,
    TrialExecutor,
    consolidate_inline,
    run_once,
)
from rsi_worker.consolidate.judging import judge_round
from rsi_worker.consolidate.opening import Next, open_run
from rsi_worker.consolidate.result import ConsolidationResult
from rsi_worker.consolidate.state import EMPTY_DIGEST, ConsolidationState, signal_digest
from rsi_worker.consolidate.trials import run_trial

__all__ = [
    "EMPTY_DIGEST",
    "ConsolidationParams",
    "ConsolidationResult",
    "ConsolidationState",
    "CountingClient",
    "Deps",
    "ModelFactory",
    "Next",
    "RoundContext",
    "SerialExecutor",
    "ThreadExecutor",
    "TrialExecutor",
    "after_incumbent",
    "build_state",
    "consolidate_inline",
    "default_models",
    "draft_and_launch",
    "draft_step",
    "finalize",
    "interrupt",
    "judge_round",
    "launch_candidate",
    "open_run",
    "run_once",
    "run_trial",
    "signal_digest",
]
