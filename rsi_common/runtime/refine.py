"""Refinement on demand, taint, revoke and audit (docs/runtime/refine.md).

* :func:`check_request` — the hostile-input checks of a refine request (fields named).
* :func:`schedule_refine` — store the request (an ``rsi_events`` row of kind ``refine_request``),
  then take the consolidation lease for the run ``refine:<request id>`` and enqueue it on queue
  ``consolidate`` like a turn's trigger, or make it wait in ``rsi:{a}:pending_refine`` (the running
  run's ``finish`` hands the lease to it ahead of a pending turn).
* :func:`agent_refine` — the agent's ``refine_request(focus)``: profile flag ``refine``, one per
  ``REFINE_COOLDOWN_S`` (``SET NX rsi:{a}:refine_cd``); never carries criteria (invariant 14).
* :func:`taint`, :func:`revoke`, :func:`audit` — the operator's tools.

A run's kind follows its lease's io: an io starting :data:`REFINE_IO_PREFIX` is a refine run, which
reads its request back with :func:`load_request`, so the host trigger, the handed-on lease and the
sweeper all start the same run (one way).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.boundary import check_id
from rsi_common.coord import Coordinator
from rsi_common.credentials import find_credentials
from rsi_common.db import get_agent, rollback_to
from rsi_common.db.models import HarnessRow, RunRow, WorldRow
from rsi_common.db.runtime_models import AgentRuntimeRow, EventRow
from rsi_common.dispatch import Dispatcher
from rsi_common.errors import InvalidInput, UnknownVersionError
from rsi_common.handoff import HandOff, enqueue_lease
from rsi_common.harness import diff_trees, h0, materialize, workspace_of
from rsi_common.runtime import keys
from rsi_common.runtime.ids import new_id
from rsi_common.runtime.tree import add_event

__all__ = [
    "KIND_REFINE",
    "MAX_CRITERIA",
    "MAX_CRITERION_CHARS",
    "MAX_FOCUS_CHARS",
    "REFINE_IO_PREFIX",
    "RefineRequest",
    "Scheduled",
    "agent_refine",
    "audit",
    "check_request",
    "load_request",
    "revoke",
    "schedule_refine",
    "taint",
]

KIND_REFINE = "refine"
REFINE_IO_PREFIX = "refine:"
MAX_CRITERIA, MAX_CRITERION_CHARS = 5, 500
MAX_FOCUS_CHARS = 500
"""A focus is one direction, as long as a criterion (decision D32)."""
MAX_REASON_CHARS = 300
AUDIT_DIFF_CHARS = 4000


@dataclass(frozen=True)
class RefineRequest:
    """One refine request: ``criteria`` are operator criteria only (never the agent's)."""

    id: str
    focus: str
    criteria: tuple[str, ...]
    requested_by: str

    @property
    def io(self) -> str:
        """The io of its run's lease (``refine:<id>``)."""
        return REFINE_IO_PREFIX + self.id

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "focus": self.focus, "criteria": list(self.criteria),
                "requested_by": self.requested_by}


@dataclass(frozen=True)
class Scheduled:
    """What became of a request: ``scheduled`` false with ``reason`` when refused (cooldown, flag)."""

    scheduled: bool
    reason: str
    request: RefineRequest | None = None
    handoff: HandOff | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scheduled": self.scheduled, "reason": self.reason}
        if self.request is not None:
            out["request"] = self.request.id
        return out


def _text(value: object, path: str, max_chars: int, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{path} must be a string")
    text = " ".join(value.split())
    if not text and not empty_ok:
        raise InvalidInput(f"{path} must not be empty")
    if len(text) > max_chars:
        raise InvalidInput(f"{path} must be at most {max_chars} characters, got {len(text)}")
    if any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in value if c not in "\n\t\r"):
        raise InvalidInput(f"{path} must not hold control characters or lone surrogates")
    if find_credentials(text):
        raise InvalidInput(f"{path} looks like it holds a credential; it is not stored")
    return text


def check_request(focus: object, criteria: object = (), requested_by: object = "operator") -> RefineRequest:
    """A checked request (a new id). Raises :class:`InvalidInput` naming the field."""
    f = _text(focus, "focus", MAX_FOCUS_CHARS, empty_ok=True)
    if isinstance(criteria, (str, bytes)) or not isinstance(criteria, Sequence):
        raise InvalidInput("criteria must be a list of strings")
    if len(criteria) > MAX_CRITERIA:
        raise InvalidInput(f"criteria: at most {MAX_CRITERIA}, got {len(criteria)}")
    crit = tuple(_text(c, f"criteria[{i}]", MAX_CRITERION_CHARS) for i, c in enumerate(criteria))
    if not f and not crit:
        raise InvalidInput("focus: a refine needs a focus or at least one criterion")
    by = check_id(requested_by, "requested_by")
    return RefineRequest(new_id("rf"), f, crit, str(by))


def schedule_refine(sessions: sessionmaker[Session], coord: Coordinator, dispatcher: Dispatcher,
                    agent: str, request: RefineRequest, *, actor: str = "operator") -> Scheduled:
    """Store ``request`` and start its run, or make it wait for the lease (module docstring).

    Raises:
        UnknownAgentError: no such agent (nothing is stored).
    """
    with sessions.begin() as s:
        get_agent(s, agent)
        add_event(s, agent, "refine_request", actor, **request.to_json())
    lease = coord.try_begin_refine(agent, request.io)
    if lease is None:
        return Scheduled(True, "waiting for the running consolidation", request, HandOff("pending"))
    handoff = enqueue_lease(coord, dispatcher, lease)
    return Scheduled(handoff.handed_off, handoff.outcome, request, handoff)


def load_request(session: Session, agent: str, io: str | None) -> RefineRequest | None:
    """The stored request of a refine run's io, or ``None`` (not a refine io, or not stored)."""
    if not io or not io.startswith(REFINE_IO_PREFIX):
        return None
    rid = io[len(REFINE_IO_PREFIX):]
    rows = session.execute(sa.select(EventRow).where(
        EventRow.agent_id == agent, EventRow.kind == "refine_request").order_by(EventRow.id.desc())).scalars()
    for row in rows:
        d = dict(row.detail or {})
        if d.get("id") == rid:
            criteria = tuple(str(c) for c in d.get("criteria") or ())
            by = str(d.get("requested_by") or "operator")
            return RefineRequest(rid, str(d.get("focus") or ""), criteria, by)
    return None


def agent_refine(sessions: sessionmaker[Session], client: redis.Redis, cooldown_s: int,
                 start: Callable[[RefineRequest], Scheduled], agent: str, focus: object) -> Scheduled:
    """The agent's ``refine_request(focus)``: needs profile ``refine``; once per ``cooldown_s``
    (``SET NX``); ``start`` schedules the checked request (run after the logical turn commits).
    Returns ``scheduled: false`` with the reason on a refusal."""
    with sessions() as s:
        rt = s.get(AgentRuntimeRow, agent)
        allowed = rt is not None and bool(dict(rt.profile or {}).get("refine"))
    if not allowed:
        return Scheduled(False, "refine is not enabled for this agent")
    try:
        request = check_request(focus, (), agent)
    except InvalidInput as exc:
        return Scheduled(False, str(exc))
    if not client.set(keys.refine_cooldown(agent), request.id, nx=True, ex=cooldown_s):
        return Scheduled(False, "cooldown: a refine was requested recently")
    return start(request)


def taint(session: Session, agent: str, io: str, reason: object, actor: str = "operator") -> int:
    """Taint the agent's world of ``io`` (tainted worlds never enter W, views, patterns or pairing).

    Returns the number of worlds tainted (0: already tainted). Raises :class:`InvalidInput`.
    """
    why = _text(reason, "reason", MAX_REASON_CHARS)
    if not isinstance(io, str) or not io or len(io) > 255:
        raise InvalidInput("io must be a turn's io id of at most 255 characters")
    row = session.execute(sa.select(WorldRow).where(WorldRow.agent_id == agent, WorldRow.io_id == io)
                          ).scalar_one_or_none()
    if row is None:
        raise InvalidInput(f"io: agent has no world for io {io[:64]!r}")
    if row.tainted:
        return 0
    row.tainted, row.taint_reason = True, why
    add_event(session, agent, "taint", actor, io=io, world=row.id, reason=why)
    return 1


def revoke(session: Session, agent: str, version: str, reason: object, *, taint_evidence: bool = False,
           actor: str = "operator") -> dict[str, Any]:
    """Revoke ``version``: ``revoked_at`` set; if current, roll back to its parent (the fenced
    compare-and-swap of the rollback path: a run in flight ends ``kept``); with ``taint_evidence``,
    taint the worlds of the run that adopted it. Raises ``InvalidInput`` / ``UnknownVersionError``."""
    why = _text(reason, "reason", MAX_REASON_CHARS)
    if not isinstance(version, str) or not version or len(version) > 100:
        raise InvalidInput("version must be a stored version string of at most 100 characters")
    agent_row = get_agent(session, agent)
    row = session.execute(sa.select(HarnessRow).where(HarnessRow.agent_id == agent,
                                                      HarnessRow.version == version)).scalar_one_or_none()
    if row is None:
        raise UnknownVersionError(f"version: agent has no stored version {version[:100]!r}")
    rolled = None
    if row.revoked_at is None:
        row.revoked_at, row.revoked_reason = datetime.now(UTC), why
    if agent_row.current_version == version:
        rollback_to(session, agent, row.parent_version)
        rolled = row.parent_version or "H0"
    tainted = 0
    if taint_evidence and row.run_id:
        run = session.get(RunRow, row.run_id)
        ids = list((run.params or {}).get("worlds") or []) if run is not None else []
        for w in session.execute(sa.select(WorldRow).where(WorldRow.id.in_(ids))).scalars():
            if not w.tainted:
                w.tainted, w.taint_reason = True, f"evidence of revoked {version[:40]}"
                tainted += 1
    add_event(session, agent, "revoke", actor, version=version, reason=why, rolled_back_to=rolled,
              tainted=tainted)
    return {"version": version, "rolled_back_to": rolled, "tainted": tainted}


def _requests(session: Session, agent: str) -> dict[str, Mapping[str, Any]]:
    rows = session.execute(sa.select(EventRow).where(EventRow.agent_id == agent,
                                                     EventRow.kind == "refine_request")).scalars()
    return {str((r.detail or {}).get("id")): dict(r.detail or {}) for r in rows}


def _diff(session: Session, agent: str, row: HarnessRow) -> str:
    """The unified diff of ``row`` against its parent (clipped to :data:`AUDIT_DIFF_CHARS`)."""
    try:
        new = materialize(row.payload)
        parent = (session.execute(sa.select(HarnessRow).where(
            HarnessRow.agent_id == agent, HarnessRow.version == row.parent_version)).scalar_one_or_none()
            if row.parent_version else None)
        old = materialize(parent.payload) if parent is not None else h0()
    except Exception as exc:  # an unreadable payload is reported, not raised
        return f"(diff unavailable: {type(exc).__name__})"
    text = diff_trees(workspace_of(old), workspace_of(new))
    return text if len(text) <= AUDIT_DIFF_CHARS else text[: AUDIT_DIFF_CHARS - 1] + "…"


def audit(session: Session, agent: str) -> list[dict[str, Any]]:
    """Per stored version, oldest first: origin, requester, focus, run, S★, δ, ΔS, ΔC, diff,
    evidence and revocation (docs/runtime/refine.md#audit). Raises ``UnknownAgentError``."""
    get_agent(session, agent)
    requests = _requests(session, agent)
    out: list[dict[str, Any]] = []
    rows = session.execute(sa.select(HarnessRow).where(HarnessRow.agent_id == agent).order_by(HarnessRow.id))
    for row in rows.scalars():
        run = session.get(RunRow, row.run_id) if row.run_id else None
        params = dict(run.params or {}) if run is not None else {}
        refine = dict(params.get("refine") or {})
        req = requests.get(str(refine.get("id")), refine)
        rnd = dict(dict(row.summary or {}).get("round") or {})
        winner: dict[str, Any] = next(
            (dict(c) for c in rnd.get("candidates") or [] if c.get("outcome") == "ACCEPTED"), {})
        origin = row.origin or ("refine" if run is not None and run.kind == KIND_REFINE
                                else "consolidate" if run is not None else "operator")
        out.append({
            "version": row.version, "parent": row.parent_version, "origin": origin,
            "requested_by": req.get("requested_by"), "focus": req.get("focus") or None,
            "criteria": list(req.get("criteria") or []), "run": row.run_id,
            "S_star": rnd.get("S_star"), "delta": rnd.get("delta"),
            "dS": winner.get("delta_S"), "dC": winner.get("delta_C"),
            "mechanism": winner.get("mechanism"), "diff": _diff(session, agent, row),
            "evidence": list(rnd.get("worlds") or []),
            "revoked_at": row.revoked_at.isoformat() if row.revoked_at else None,
            "revoked_reason": row.revoked_reason,
        })
    return out
