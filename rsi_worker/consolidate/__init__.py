"""Turn consolidation (docs/algorithm/consolidation.md §3) as plain functions.

Each step loads its inputs from SQL, computes, and stores what the next step needs. The run's
state machine (:mod:`~rsi_worker.consolidate.flow`) declares the steps and what follows each, and
applies the lease and spend checks around them; the Celery tasks (``rsi_worker.cluster.tasks``) and
the in-process driver (:func:`consolidate_inline`) both drive it: :func:`open_run` → trials
(incumbent) → ``after_incumbent`` → drafts, each launching its candidate's trials as soon as it
passed (``draft_and_launch``) → ``judge_round`` → :func:`finalize`.
"""

from __future__ import annotations

from rsi_common.config import ConsolidationParams
from rsi_worker.consolidate.context import CountingClient, Deps, ModelFactory, RoundContext, default_models
from rsi_worker.consolidate.finalize import build_state, finalize, interrupt
from rsi_worker.consolidate.flow import fail_run, open_run, run_draft, run_step, run_trial
from rsi_worker.consolidate.inline import (
    SerialExecutor,
    ThreadExecutor,
    TrialExecutor,
    consolidate_inline,
    run_once,
)
from rsi_worker.consolidate.outcome import Next
from rsi_worker.consolidate.result import ConsolidationResult
from rsi_worker.consolidate.state import EMPTY_DIGEST, ConsolidationState, signal_digest

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
    "build_state",
    "consolidate_inline",
    "default_models",
    "fail_run",
    "finalize",
    "interrupt",
    "open_run",
    "run_draft",
    "run_once",
    "run_step",
    "run_trial",
    "signal_digest",
]
