"""Read models shared by the JSON API and the console: agents with their status, one run's full record
and trial matrix, the series the agent page plots. Plain functions of a session; JSON-shaped output.

Statuses (project decision): ``running`` (a run of the agent is ``running``), else ``pinned`` (frozen,
and the newest of its pin / freeze / unfreeze actions in the audit log is a pin — a pin made with the
CLI shows as ``frozen``), else ``frozen``, else ``idle``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rsi_common import db
from rsi_common.db import AgentRow, AuditRow, HarnessRow, RegressionRow, ReplayRow, RunRow

__all__ = [
    "AGENT_STATUSES",
    "agent_summaries",
    "audit_dicts",
    "lineage_timeline",
    "regression_set",
    "run_record",
    "run_series",
    "runs_page",
    "trial_matrix",
]

AGENT_STATUSES = ("idle", "running", "frozen", "pinned")
_FINAL = ("adopted", "kept", "recorded", "failed", "skipped", "interrupted")
_PRIVATE_PARAMS = ("token",)
"""Run parameters never shown: the lease token is a capability of the run's tasks."""


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _running_ids(s: Session, ids: Sequence[str]) -> set[str]:
    rows = s.execute(
        sa.select(RunRow.agent_id).where(RunRow.agent_id.in_(ids), RunRow.status == "running").distinct()
    ).scalars()
    return {str(r) for r in rows}


def _pinned_ids(s: Session, ids: Sequence[str]) -> set[str]:
    if not ids:
        return set()
    newest = (
        sa.select(AuditRow.agent_id, sa.func.max(AuditRow.id).label("id"))
        .where(
            AuditRow.agent_id.in_(ids),
            AuditRow.outcome == "ok",
            AuditRow.action.in_(("pin", "freeze", "unfreeze")),
        )
        .group_by(AuditRow.agent_id)
        .subquery()
    )
    rows = s.execute(
        sa.select(AuditRow.agent_id).join(newest, AuditRow.id == newest.c.id).where(AuditRow.action == "pin")
    ).scalars()
    return {str(r) for r in rows}


def status_of(agent: AgentRow, running: bool, pinned: bool) -> str:
    """The agent's status (module docstring)."""
    if running:
        return "running"
    if agent.frozen:
        return "pinned" if pinned else "frozen"
    return "idle"


def agent_summaries(
    s: Session,
    *,
    prefix: str | None = None,
    q: str | None = None,
    status: str | None = None,
    limit: int = 50,
    after: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of agents in id order with status, current version, last outcome and adoptions.

    Args:
        prefix: only agents whose id starts with this (the token's tenant).
        q: only agents whose id contains this.
        status: only agents with this status (:data:`AGENT_STATUSES`).
        limit: page size.
        after: the previous page's last agent id.

    Returns:
        ``(agents, next_cursor)``; the cursor is ``None`` on the last page.
    """
    stmt = sa.select(AgentRow).order_by(AgentRow.id)
    if prefix:
        stmt = stmt.where(AgentRow.id.startswith(prefix, autoescape=True))
    if q:
        stmt = stmt.where(AgentRow.id.contains(q, autoescape=True))
    if after:
        stmt = stmt.where(AgentRow.id > after)
    running_q = sa.select(RunRow.agent_id).where(RunRow.status == "running")
    if status == "running":
        stmt = stmt.where(AgentRow.id.in_(running_q))
    elif status in ("frozen", "pinned"):
        stmt = stmt.where(AgentRow.frozen.is_(True), AgentRow.id.not_in(running_q))
    elif status == "idle":
        stmt = stmt.where(AgentRow.frozen.is_(False), AgentRow.id.not_in(running_q))
    out: list[dict[str, Any]] = []
    cursor: str | None = after
    while len(out) < limit:
        rows = list(
            s.execute(stmt.where(AgentRow.id > cursor) if cursor else stmt).scalars().fetchmany(limit + 1)
        )
        page = _summaries(s, rows[:limit])
        if status in ("frozen", "pinned"):
            page = [a for a in page if a["status"] == status]
        out.extend(page)
        if len(rows) <= limit:
            return out[:limit], None
        cursor = rows[limit - 1].id
    return out[:limit], out[limit - 1]["agent_id"] if len(out) >= limit else None


def _summaries(s: Session, rows: Sequence[AgentRow]) -> list[dict[str, Any]]:
    ids = [r.id for r in rows]
    if not ids:
        return []
    running, pinned = _running_ids(s, ids), _pinned_ids(s, ids)
    adoptions = {
        str(a): int(n)
        for a, n in s.execute(
            sa.select(RunRow.agent_id, sa.func.count())
            .where(RunRow.agent_id.in_(ids), RunRow.status == "adopted")
            .group_by(RunRow.agent_id)
        )
    }
    ranked = (
        sa.select(
            RunRow.agent_id,
            RunRow.status,
            RunRow.reason,
            RunRow.finished_at,
            sa.func.row_number()
            .over(partition_by=RunRow.agent_id, order_by=(RunRow.started_at.desc(), RunRow.id.desc()))
            .label("n"),
        )
        .where(RunRow.agent_id.in_(ids), RunRow.status.in_(_FINAL))
        .subquery()
    )
    last = {r.agent_id: r for r in s.execute(sa.select(ranked).where(ranked.c.n == 1))}
    out = []
    for a in rows:
        lr = last.get(a.id)
        out.append(
            {
                "agent_id": a.id,
                "status": status_of(a, a.id in running, a.id in pinned),
                "current_version": a.current_version,
                "frozen": a.frozen,
                "last_outcome": (
                    {"status": lr.status, "reason": lr.reason, "finished_at": _iso(lr.finished_at)}
                    if lr is not None
                    else None
                ),
                "adoptions": int(adoptions.get(a.id, 0)),
                "updated_at": _iso(a.updated_at),
            }
        )
    return out


def agent_summary(s: Session, agent_id: str) -> dict[str, Any]:
    """One agent's summary (raises ``UnknownAgentError``)."""
    return _summaries(s, [db.get_agent(s, agent_id)])[0]


def run_dict(r: RunRow, *, full: bool = False) -> dict[str, Any]:
    """A run row as JSON; ``full`` adds the round parameters (lease token removed) and the drafts."""
    out: dict[str, Any] = {
        "run_id": r.id,
        "agent_id": r.agent_id,
        "kind": r.kind,
        "io_id": r.io_id,
        "status": r.status,
        "reason": r.reason,
        "start_version": r.start_version,
        "adopted_version": r.adopted_version,
        "fence": r.fence,
        "result": r.result,
        "error": r.error,
        "started_at": _iso(r.started_at),
        "finished_at": _iso(r.finished_at),
    }
    if full:
        out["params"] = {k: v for k, v in (r.params or {}).items() if k not in _PRIVATE_PARAMS}
        out["drafts"] = r.drafts
    return out


def runs_page(s: Session, agent_id: str, *, limit: int = 50, before: str | None = None) -> list[RunRow]:
    """The agent's runs, newest first, older than run ``before`` when given."""
    stmt = sa.select(RunRow).where(RunRow.agent_id == agent_id)
    if before:
        ref = s.get(RunRow, before)
        if ref is not None:
            stmt = stmt.where(
                sa.or_(
                    RunRow.started_at < ref.started_at,
                    sa.and_(RunRow.started_at == ref.started_at, RunRow.id < ref.id),
                )
            )
    return list(s.execute(stmt.order_by(RunRow.started_at.desc(), RunRow.id.desc()).limit(limit)).scalars())


def _cell(row: ReplayRow, early_stopped: bool) -> dict[str, Any]:
    if row.status == "ok":
        outcome = "pass" if row.reward >= 1.0 else "fail"
    elif row.status == "cancelled":
        outcome = "early-stopped" if early_stopped else "cancelled"
    else:
        outcome = "missing"
    return {
        "trial": row.trial,
        "outcome": outcome,
        "status": row.status,
        "source": row.source,
        "reward": row.reward,
        "weight": row.weight,
        "tokens": row.tokens,
    }


def trial_matrix(rows: Sequence[ReplayRow], round_: dict[str, Any]) -> dict[str, Any]:
    """Worlds × candidates × trials of a run: each cell pass, fail, cancelled, early-stopped or missing,
    with its source (recorded, cached, replay), reward and tokens.

    Returns:
        ``{"worlds": [...], "candidates": [...], "cells": {world: {candidate: [cell, …]}}}``.
    """
    stopped = {c.get("variant") for c in round_.get("candidates") or [] if c.get("early_stopped")}
    worlds: list[str] = list(round_.get("worlds") or [])
    cands = ["incumbent"]
    cells: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in sorted(rows, key=lambda r: (r.world_id, r.candidate, r.trial)):
        if r.world_id not in worlds:
            worlds.append(r.world_id)
        if r.candidate not in cands:
            cands.append(r.candidate)
        cells.setdefault(r.world_id, {}).setdefault(r.candidate, []).append(_cell(r, r.candidate in stopped))
    cands = ["incumbent", *sorted(c for c in cands if c != "incumbent")]
    return {"worlds": worlds, "candidates": cands, "cells": cells}


def run_record(s: Session, run_id: str) -> dict[str, Any] | None:
    """One run with its full record: round parameters, drafts, result and trial matrix; ``None`` if
    there is no such run."""
    row = s.get(RunRow, run_id)
    if row is None:
        return None
    out = run_dict(row, full=True)
    round_ = (row.result or {}).get("round") or (row.params or {}).get("round") or {}
    out["trials"] = trial_matrix(db.replay_rows(s, run_id), round_)
    return out


def regression_set(s: Session, agent_id: str, current: str | None) -> list[dict[str, Any]]:
    """The agent's lessons (no world copies), oldest first; ``active`` when replayed in later rounds
    (learned by the current version or an ancestor)."""
    active = set(db.ancestry(s, agent_id, current))
    cols = (
        RegressionRow.id,
        RegressionRow.version,
        RegressionRow.run_id,
        RegressionRow.world_id,
        RegressionRow.lesson,
        RegressionRow.created_at,
        RegressionRow.last_used_at,
    )
    rows = s.execute(
        sa.select(*cols)
        .where(RegressionRow.agent_id == agent_id)
        .order_by(RegressionRow.created_at, RegressionRow.id)
    ).all()
    return [
        {
            "id": r.id,
            "version": r.version,
            "run_id": r.run_id,
            "world_id": r.world_id,
            "lesson": r.lesson,
            "active": r.version in active,
            "created_at": _iso(r.created_at),
            "last_used_at": _iso(r.last_used_at),
        }
        for r in rows
    ]


def lineage_timeline(s: Session, agent_id: str) -> list[dict[str, Any]]:
    """Versions (parent, run) and operator moves (rollback, pin, freeze, …, from the audit log) in
    time order, oldest first."""
    cols = (HarnessRow.version, HarnessRow.parent_version, HarnessRow.run_id, HarnessRow.created_at)
    events: list[dict[str, Any]] = [
        {
            "kind": "version",
            "version": v.version,
            "parent_version": v.parent_version,
            "run_id": v.run_id,
            "at": v.created_at,
        }
        for v in s.execute(sa.select(*cols).where(HarnessRow.agent_id == agent_id).order_by(HarnessRow.id))
    ]
    moves = s.execute(
        sa.select(AuditRow)
        .where(
            AuditRow.agent_id == agent_id,
            AuditRow.outcome == "ok",
            AuditRow.action.in_(("rollback", "pin", "freeze", "unfreeze", "clone")),
        )
        .order_by(AuditRow.id)
    ).scalars()
    events += [{"kind": m.action, "version": m.target, "by": m.token_name, "at": m.at} for m in moves]
    events.sort(key=lambda e: e["at"])
    for e in events:
        e["at"] = _iso(e["at"])
    return events


def audit_dicts(rows: Sequence[AuditRow]) -> list[dict[str, Any]]:
    """Audit rows as JSON."""
    return [
        {
            "id": r.id,
            "at": _iso(r.at),
            "token_id": r.token_id,
            "token_name": r.token_name,
            "action": r.action,
            "agent_id": r.agent_id,
            "target": r.target,
            "outcome": r.outcome,
            "detail": r.detail,
        }
        for r in rows
    ]


def run_series(s: Session, agent_id: str) -> list[dict[str, Any]]:
    """Per run, oldest first, what the agent page plots: the incumbent's S, each candidate's S, δ,
    whether it adopted, its tokens. Runs without a round have ``S`` ``None`` (only tokens plotted)."""
    rows = s.execute(
        sa.select(RunRow.id, RunRow.status, RunRow.result, RunRow.started_at)
        .where(RunRow.agent_id == agent_id)
        .order_by(RunRow.started_at, RunRow.id)
    ).all()
    out = []
    for r in rows:
        result = r.result or {}
        rnd = result.get("round") or {}
        inc = rnd.get("incumbent") or {}
        out.append(
            {
                "run_id": r.id,
                "status": r.status,
                "adopted": r.status == "adopted",
                "S": inc.get("S"),
                "delta": rnd.get("delta"),
                "S_star": rnd.get("S_star"),
                "candidates": [
                    {"variant": c.get("variant"), "S": c.get("S"), "outcome": c.get("outcome")}
                    for c in rnd.get("candidates") or []
                ],
                "tokens": int((result.get("spend") or {}).get("tokens") or 0),
            }
        )
    return out
