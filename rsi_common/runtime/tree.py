"""Registered agents and their trees: registration, lifecycle, events (docs/runtime/README.md#lifecycle).

Every function runs inside the caller's transaction and never commits. A lifecycle transition and
its ``rsi_events`` row are written in the same transaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rsi_common.boundary import is_id
from rsi_common.db.agents import ensure_agent
from rsi_common.db.runtime_models import LIFECYCLES, AgentRuntimeRow, EventRow, SessionRow
from rsi_common.errors import InvalidInput, UnknownAgentError
from rsi_common.runtime.ids import RESERVED_IDS

__all__ = [
    "AgentProfile",
    "add_event",
    "descendants",
    "ensure_session",
    "get_runtime",
    "register",
    "set_lifecycle",
]

RunsOn = Literal["cluster", "host"]


@dataclass(frozen=True)
class AgentProfile:
    """How a registered agent runs (docs/runtime/README.md#terms).

    Attributes:
        runs_on: ``cluster`` (task ``rsi.agent_turn``) or ``host`` (never woken).
        provider: model provider; children use the parent's.
        model: model name; children use the parent's.
        system_parts: ``[[label, text], …]`` system prompt parts.
        toolset: the toolset this agent's tools come from (``sim`` built in).
        tools: the tools granted (a part of the toolset).
        kwargs: model keyword arguments.
        messages: the agent may use ``message_send`` / ``message_receive``.
        refine: the agent may call ``refine_request``.
        subagents: the operator's sub-agent catalog ``{spec: {description, tools, max_iterations,
            instructions}}`` (docs/runtime/README.md#decisions D12); empty = not enabled.
    """

    runs_on: RunsOn = "cluster"
    provider: str = "sim"
    model: str = "sim-1"
    system_parts: tuple[tuple[str, str], ...] = ()
    toolset: str = "sim"
    tools: tuple[str, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    messages: bool = True
    refine: bool = False
    subagents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The profile as stored in ``rsi_agent_runtime.profile``."""
        out = asdict(self)
        out["system_parts"] = [list(p) for p in self.system_parts]
        out["tools"] = list(self.tools)
        out["kwargs"] = dict(self.kwargs)
        out["subagents"] = {k: dict(v) for k, v in self.subagents.items()}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentProfile:
        """Read a stored or submitted profile.

        Raises:
            InvalidInput: an unknown key or a value of the wrong type (named by its key).
        """
        known = set(cls.__dataclass_fields__)
        extra = sorted(set(data) - known)
        if extra:
            raise InvalidInput(f"profile: unknown key {extra[0][:64]!r}")
        p = dict(data)
        if p.get("runs_on", "cluster") not in ("cluster", "host"):
            raise InvalidInput("profile.runs_on must be 'cluster' or 'host'")
        for key in ("provider", "model", "toolset"):
            if key in p and (not isinstance(p[key], str) or not p[key] or len(p[key]) > 255):
                raise InvalidInput(f"profile.{key} must be a non-empty string of at most 255 characters")
        tools = p.get("tools", ())
        if not isinstance(tools, (list, tuple)) or not all(isinstance(t, str) and is_id(t, max_chars=64)
                                                           for t in tools):
            raise InvalidInput("profile.tools must be a list of tool names")
        parts = p.get("system_parts", ())
        pairs = isinstance(parts, (list, tuple)) and all(
            isinstance(x, (list, tuple)) and len(x) == 2 and all(isinstance(y, str) for y in x)
            for x in parts)
        if not pairs:
            raise InvalidInput("profile.system_parts must be a list of [label, text] pairs")
        if not isinstance(p.get("kwargs", {}), Mapping):
            raise InvalidInput("profile.kwargs must be an object")
        for key in ("messages", "refine"):
            if key in p and not isinstance(p[key], bool):
                raise InvalidInput(f"profile.{key} must be true or false")
        p["subagents"] = _catalog(p.get("subagents", {}), tuple(tools))
        p["tools"] = tuple(tools)
        p["system_parts"] = tuple((a, b) for a, b in parts)
        return cls(**p)


SPEC_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
"""Spec and handle-name grammar."""


def _catalog(raw: Any, grant: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Check an operator's catalog: names, descriptions, tools within the grant, iterations, and the
    instructions each spec requires."""
    if not isinstance(raw, Mapping):
        raise InvalidInput("profile.subagents must be an object")
    out: dict[str, dict[str, Any]] = {}
    for name, spec in raw.items():
        where = f"profile.subagents.{str(name)[:32]}"
        if not isinstance(name, str) or not SPEC_NAME.match(name):
            raise InvalidInput(f"{where}: a spec name must match ^[a-z][a-z0-9-]{{0,31}}$")
        if not isinstance(spec, Mapping) or set(spec) - {"description", "tools", "max_iterations",
                                                          "instructions"}:
            raise InvalidInput(f"{where}: keys are description, tools, max_iterations, instructions")
        desc, tools = spec.get("description", ""), spec.get("tools", [])
        iters, text = spec.get("max_iterations", 8), spec.get("instructions")
        if not isinstance(desc, str) or len(desc) > 500:
            raise InvalidInput(f"{where}.description must be text of at most 500 characters")
        if not isinstance(tools, list) or not all(isinstance(t, str) and t in grant for t in tools):
            raise InvalidInput(f"{where}.tools must name tools of the agent's grant")
        if isinstance(iters, bool) or not isinstance(iters, int) or not 1 <= iters <= 100:
            raise InvalidInput(f"{where}.max_iterations must be an integer from 1 to 100")
        if not isinstance(text, str) or not text.strip() or len(text) > 16_384:
            raise InvalidInput(f"{where}.instructions are required (at most 16,384 characters)")
        out[name] = {"description": desc, "tools": list(tools), "max_iterations": iters, "instructions": text}
    return out


def add_event(session: Session, agent_id: str, kind: str, actor: str, **detail: Any) -> None:
    """Append one audit event."""
    session.add(EventRow(agent_id=agent_id, kind=kind, actor=actor, detail=detail))


def get_runtime(session: Session, agent_id: str, *, lock: bool = False) -> AgentRuntimeRow:
    """The agent's runtime row (locked ``FOR UPDATE`` on PostgreSQL with ``lock``).

    Raises:
        UnknownAgentError: the agent is not registered.
    """
    stmt = sa.select(AgentRuntimeRow).where(AgentRuntimeRow.agent_id == agent_id)
    if lock and session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    row = session.execute(stmt).scalar_one_or_none()
    if row is None:
        raise UnknownAgentError(f"agent {agent_id[:128]!r} is not registered with the runtime")
    return row


def register(session: Session, agent_id: str, profile: AgentProfile, *, caps: Mapping[str, Any] | None = None,
             actor: str = "host") -> AgentRuntimeRow:
    """Register a root agent (or update a registered root's profile and caps).

    Raises:
        InvalidInput: a reserved id (``run``, ``tree``, ``sa``), an id outside the grammar, or the
            agent is a child (children are registered by their spawn).
    """
    if agent_id in RESERVED_IDS:
        raise InvalidInput(f"agent id {agent_id!r} is reserved by the runtime")
    ensure_agent(session, agent_id)
    row = session.execute(sa.select(AgentRuntimeRow).where(AgentRuntimeRow.agent_id == agent_id)
                          ).scalar_one_or_none()
    if row is None:
        row = AgentRuntimeRow(agent_id=agent_id, root_id=agent_id, parent_id=None, depth=0, spec=None,
                              profile=profile.to_json(), lifecycle="admitted",
                              caps=dict(caps) if caps else None)
        session.add(row)
        add_event(session, agent_id, "lifecycle", actor, to="admitted", reason="registered")
        session.flush()
        return row
    if row.parent_id is not None:
        raise InvalidInput(f"agent {agent_id!r} is a child agent; it is registered by its spawn")
    row.profile = profile.to_json()
    row.caps = dict(caps) if caps else None
    return row


def set_lifecycle(session: Session, row: AgentRuntimeRow, to: str, actor: str, reason: str) -> bool:
    """Move ``row`` to lifecycle ``to`` and log it; ``False`` (nothing written) if already there or
    deleted (a tombstone never comes back)."""
    if to not in LIFECYCLES:
        raise InvalidInput(f"lifecycle must be one of {', '.join(LIFECYCLES)}")
    if row.lifecycle == to or row.lifecycle == "deleted":
        return False
    detail = {"from": row.lifecycle, "to": to, "reason": reason}
    add_event(session, row.agent_id, "lifecycle", actor, **detail)
    row.lifecycle = to
    return True


def descendants(session: Session, agent_id: str) -> list[AgentRuntimeRow]:
    """Every registered descendant of ``agent_id``, breadth first (the tree is acyclic: depth ≤ 3)."""
    out: list[AgentRuntimeRow] = []
    frontier = [agent_id]
    while frontier:
        rows = list(session.execute(sa.select(AgentRuntimeRow).where(
            AgentRuntimeRow.parent_id.in_(frontier)).order_by(AgentRuntimeRow.agent_id)).scalars())
        out += rows
        frontier = [r.agent_id for r in rows]
    return out


def ensure_session(session: Session, agent_id: str, name: str) -> SessionRow:
    """The agent × session row, created empty if missing."""
    row = session.execute(sa.select(SessionRow).where(SessionRow.agent_id == agent_id,
                                                      SessionRow.session == name)).scalar_one_or_none()
    if row is None:
        row = SessionRow(agent_id=agent_id, session=name, messages=[], turns=0, slice=0, version=0)
        session.add(row)
        session.flush()
    return row
