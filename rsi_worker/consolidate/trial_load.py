"""A trial member's reads, all in one read transaction (docs/performance/consolidation.md#a-trials-cost).

A trial used to read the run row with the ORM and decode its whole context (``flow._load``), then
open a second read transaction for its slot's stored row, its world, its harness and the verdict
cache (``trials._reads``). :func:`load_trial` does both in one deferred transaction (no write turn on
SQLite): the run row's ``status`` and its ``params`` and ``drafts`` as stored text (one Core
``SELECT``), decoded only when this process has not decoded that text before
(:data:`~rsi_worker.consolidate.trial_memo.contexts`, ``drafts``), then — for a running run — the
slot's stored row and the trial's other reads (:func:`read_slot`).

The decoded context and drafts are shared between the trials of the process: read-only. A run that
is not ``running`` reads nothing more (the member is ``stale``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rsi_common.db import get_agent, get_harness
from rsi_common.db.models import RunRow
from rsi_common.db.replays import stored_trial
from rsi_common.errors import InvalidInput
from rsi_common.harness import Harness, h0, materialize
from rsi_worker.consolidate import trial_memo
from rsi_worker.consolidate.context import Deps, RoundContext, load_world
from rsi_worker.consolidate.evaluate import INCUMBENT, TrialSlot

__all__ = ["TrialLoad", "TrialReads", "load_trial", "read_slot", "run_view"]

_READ = {"sqlite_begin": "DEFERRED"}
_RUNS: Any = RunRow.__table__
_RUN = sa.select(_RUNS.c.status, sa.cast(_RUNS.c.params, sa.Text), sa.cast(_RUNS.c.drafts, sa.Text)).where(
    _RUNS.c.id == sa.bindparam("run_id"))
"""The run row's status and JSON columns as stored text, built once on the table (no per-call
statement building, no ORM execution path)."""


@dataclass(frozen=True)
class TrialReads:
    """A trial's reads: the slot's stored row (``None``: not stored), the agent's verdict cache, the
    world (``None``: no longer stored) and the harness (``None``: ``harness_error`` says why)."""

    existing: dict[str, Any] | None
    verdicts: Mapping[str, Any]
    world: Any
    harness: Harness | None
    harness_error: str


@dataclass(frozen=True)
class TrialLoad:
    """What a trial member reads before its work: the run's context, status and drafts, and — for a
    running run — the trial's reads (``None`` otherwise)."""

    ctx: RoundContext
    status: str
    drafts: Mapping[str, Any]
    reads: TrialReads | None


def _context(run_id: str, text: str | None) -> RoundContext:
    found = trial_memo.contexts.get((run_id, text), lambda: RoundContext.from_json(
        json.loads(text) if text is not None else {}))
    assert found is not None
    return found


def _drafts(run_id: str, text: str | None) -> Mapping[str, Any]:
    if text is None:
        return {}
    found = trial_memo.drafts.get((run_id, text), lambda: dict(json.loads(text) or {}))
    return found if found is not None else {}


def run_view(session: Session, run_id: str) -> tuple[RoundContext, str, Mapping[str, Any]]:
    """The run's context, status and drafts (shared, read-only), read in ``session``'s transaction.

    Raises:
        InvalidInput: no such run.
        StoredDataError: the stored context is not a known format (naming the field).
    """
    found = session.connection().execute(_RUN, {"run_id": run_id}).one_or_none()
    if found is None:
        raise InvalidInput(f"unknown run {run_id!r}")
    return _context(run_id, found[1]), str(found[0]), _drafts(run_id, found[2])


def _harness(session: Session, ctx: RoundContext, candidate: str, drafts: Mapping[str, Any]) -> Harness:
    if candidate != INCUMBENT:
        return materialize(drafts[candidate]["payload"])
    version = ctx.start_version
    if version is None:
        return h0()
    found = trial_memo.harnesses.get((ctx.agent_id, version), lambda: materialize(
        get_harness(session, ctx.agent_id, version).payload))
    assert found is not None
    return found


def read_slot(session: Session, ctx: RoundContext, slot: TrialSlot, drafts: Mapping[str, Any]) -> TrialReads:
    """A trial's reads in ``session``'s transaction: the stored row alone when the slot has one.
    Worlds, the incumbent harness and the verdict cache come from :mod:`trial_memo` when this
    process read them before."""
    existing = stored_trial(session, ctx.run_id, slot.candidate, slot.world_id, slot.trial)
    if existing is not None:
        return TrialReads(existing, {}, None, None, "")
    verdicts = trial_memo.verdicts.get((ctx.agent_id, ctx.run_id), lambda: trial_memo.verdict_cache(
        get_agent(session, ctx.agent_id).state or {}))
    world = trial_memo.worlds.get((ctx.agent_id, slot.world_id),
                                  lambda: load_world(session, slot.world_id, ctx.agent_id))
    harness: Harness | None = None
    harness_error = ""
    try:
        harness = _harness(session, ctx, slot.candidate, drafts)
    except Exception as exc:
        harness_error = f"{type(exc).__name__}: {exc}"[:300]
    return TrialReads(None, verdicts or {}, world, harness, harness_error)


def load_trial(deps: Deps, run_id: str, slot: TrialSlot) -> TrialLoad:
    """The run row and, for a running run, the trial's reads, in one read transaction (module docstring).

    Raises:
        InvalidInput: no such run.
        StoredDataError: the stored context is not a known format.
    """
    with deps.sessions() as session:
        session.connection(execution_options=_READ)
        ctx, status, drafts = run_view(session, run_id)
        reads = read_slot(session, ctx, slot, drafts) if status == "running" else None
        session.commit()  # no transaction stays open across model calls (read-only)
    return TrialLoad(ctx, status, drafts, reads)
