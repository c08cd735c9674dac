"""The host and operator API of the runtime: :class:`RuntimeClient` (docs/runtime/README.md#host-api).

Built on a :class:`~rsi_common.client.RsiClient` (its engine, Redis client and dispatcher). Every
method validates its input and raises :class:`~rsi_common.errors.InvalidInput` (a
``RuntimeRefusal`` for a refused runtime action) naming the field; nothing is stored on a refusal.
Turns are woken on queue ``agents`` through the client's dispatcher (``SET NX`` wake marks), or
through the ``wake`` given (the inline driver).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams
from rsi_common.db.runtime_models import AgentRuntimeRow, MessageRow, SubagentRow
from rsi_common.dispatch import QUEUE_AGENTS, TASK_AGENT_TURN
from rsi_common.errors import InvalidInput
from rsi_common.runtime.caps import CAP_FIELDS, resolve_caps
from rsi_common.runtime.host_checks import check_address, check_object, check_session, check_text_field
from rsi_common.runtime.host_goals import GoalsHostMixin
from rsi_common.runtime.host_subagents import host_spawn, host_wait, set_spec
from rsi_common.runtime.messages import Sender, send, wake_after_commit
from rsi_common.runtime.refine import (
    RefineRequest,
    Scheduled,
    agent_refine,
    audit,
    check_request,
    revoke,
    schedule_refine,
    taint,
)
from rsi_common.runtime.spend import agent_totals, db_day, tree_totals
from rsi_common.runtime.subagents import after_settle, cancel, delete_agent, item
from rsi_common.runtime.tree import AgentProfile, descendants, get_runtime, register, set_lifecycle
from rsi_common.runtime.turns import marked_wake

__all__ = ["RuntimeClient"]


class RuntimeClient(GoalsHostMixin):
    """Register agents, post turns and messages, read trees and spend, cancel and delete.

    Args:
        client: the recording client whose engine, Redis and dispatcher the runtime uses.
        params: runtime settings (default: the client's ``settings.runtime``).
        wake: how a turn is woken (default: a wake mark and ``rsi.agent_turn`` on queue ``agents``).
        actor: who is acting, written in events (``operator:<name>`` or ``host``).
    """

    def __init__(self, client: RsiClient, *, params: RuntimeParams | None = None,
                 wake: Callable[[str, str], None] | None = None, actor: str = "host") -> None:
        self.client = client
        self.params = params or client.settings.runtime
        self.sessions = client._sessions
        self.actor = actor
        self.wake = wake or marked_wake(client.redis, lambda a, s: client.dispatcher.enqueue(
            TASK_AGENT_TURN, [a, s], QUEUE_AGENTS))

    # --- agents -------------------------------------------------------------------------------

    def register(self, agent: str, profile: AgentProfile | Mapping[str, Any],
                 caps: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Register (or update) a root agent; ``caps`` override the daily caps of its tree."""
        check_object(caps, "caps", nullable=True)
        prof = profile if isinstance(profile, AgentProfile) else AgentProfile.from_json(
            check_object(profile, "profile"))
        resolve_caps(self.params, caps)  # refuses bad caps before anything is written
        with self.sessions.begin() as s:
            row = register(s, agent, prof, caps=caps, actor=self.actor)
            return {"agent": row.agent_id, "lifecycle": row.lifecycle, "caps": row.caps}

    def start_turn(self, agent: str, text: str, session: str = "main") -> list[dict[str, Any]]:
        """Post ``text`` to ``agent``'s ``session`` as an operator message and wake its turn."""
        check_session(session)
        return self.send(f"{agent}@{session}" if session != "main" else agent, text)

    def send(self, to: str, text: str) -> list[dict[str, Any]]:
        """An operator's or host's message to any agent (``<agent>`` or ``<agent>@<session>``)."""
        check_address(to)
        check_text_field(text, "text", self.params.msg_max_chars)
        with self.sessions.begin() as s:
            agent = to.partition("@")[0]
            root = get_runtime(s, agent).root_id
            caps = resolve_caps(self.params, get_runtime(s, root).caps)
            receipts, boxes = send(s, self.client.redis, self.params, caps,
                                   Sender(None, io=secrets.token_hex(8), actor=self.actor), to, text)
        for box in wake_after_commit(self.client.redis, boxes):
            self.wake(box.agent, box.session)
        return receipts

    def inbox(self, agent: str, session: str = "main") -> list[dict[str, Any]]:
        """The unconsumed messages of a mailbox, oldest first (id, kind, sender, relationship, text)."""
        with self.sessions() as s:
            rows = s.execute(sa.select(MessageRow).where(
                MessageRow.recipient == agent, MessageRow.session_id == session,
                MessageRow.consumed_io.is_(None)).order_by(MessageRow.seq)).scalars()
            return [{"id": m.id, "kind": m.kind, "sender": m.sender, "relationship": m.relationship,
                     "text": m.text, "hops": m.hops} for m in rows]

    def tree(self, agent: str) -> dict[str, Any]:
        """``agent`` and its descendants: lifecycle, depth, spec, handles, and the tree's spend today."""
        with self.sessions() as s:
            top = get_runtime(s, agent)
            rows = [top, *descendants(s, agent)]
            handles = list(s.execute(sa.select(SubagentRow).where(
                SubagentRow.parent_agent.in_([r.agent_id for r in rows])).order_by(
                SubagentRow.created_at, SubagentRow.id)).scalars())
            day = db_day(s)
            spent = tree_totals(s, top.root_id, day)

        def node(r: AgentRuntimeRow) -> dict[str, Any]:
            return {"agent": r.agent_id, "lifecycle": r.lifecycle, "depth": r.depth, "spec": r.spec,
                    "handles": [item(h) for h in handles if h.parent_agent == r.agent_id],
                    "children": [node(c) for c in rows if c.parent_id == r.agent_id]}

        return {"root": top.root_id, "day": day, "spend": asdict(spent), "tree": node(top)}

    def lifecycle(self, agent: str) -> str:
        """The agent's lifecycle state."""
        with self.sessions() as s:
            return get_runtime(s, agent).lifecycle

    def restore(self, agent: str) -> str:
        """Return a ``failed`` agent to ``idle``.

        Raises:
            InvalidInput: the agent is not ``failed``.
        """
        with self.sessions.begin() as s:
            row = get_runtime(s, agent)
            if row.lifecycle != "failed":
                raise InvalidInput(f"agent {agent!r} is {row.lifecycle}, not failed")
            set_lifecycle(s, row, "idle", self.actor, "restored")
            return row.lifecycle

    def delete(self, agent: str) -> list[str]:
        """Tombstone the agent and its descendants; cancel their live handles (returned)."""
        with self.sessions.begin() as s:
            done = delete_agent(s, agent, actor=self.actor)
        after_settle(self.client.redis, done, cancelled=True, ttl_s=self.params.child_timeout_s)
        return done

    # --- sub-agents ---------------------------------------------------------------------------

    def poll(self, handle: str) -> dict[str, Any]:
        """A handle's item."""
        with self.sessions() as s:
            row = s.get(SubagentRow, handle)
            if row is None:
                raise InvalidInput("unknown_handle: no such handle")
            return item(row)

    def cancel(self, handle: str, reason: str = "operator") -> list[str]:
        """Cancel a handle and everything below it; returns the handles cancelled."""
        with self.sessions.begin() as s:
            if s.get(SubagentRow, handle) is None:
                raise InvalidInput("unknown_handle: no such handle")
            done = cancel(s, handle, reason[:100], actor=self.actor)
            parents = {(r.parent_agent, r.parent_session) for r in
                       s.execute(sa.select(SubagentRow).where(SubagentRow.id.in_(done))).scalars()}
        after_settle(self.client.redis, done, cancelled=True, ttl_s=self.params.child_timeout_s)
        for agent, session in sorted(parents):
            self.wake(agent, session)
        return done

    def spawn(self, parent: str, spec: str, input: str, name: str | None = None, session: str = "main",
              request_id: str | None = None) -> dict[str, Any]:
        """Spawn a child of ``parent`` from the host (R2.3 admission; a retry with the same
        ``request_id`` returns the same handle): :func:`~rsi_common.runtime.host_subagents.host_spawn`."""
        return host_spawn(self.sessions, self.params, self.wake, parent, spec, input, name=name,
                          session=session, request_id=request_id)

    def wait(self, handles: list[str], timeout_s: float | None = None, mode: str = "all") -> dict[str, Any]:
        """Block until the handles settle or ``min(timeout_s, WAIT_CAP_S)`` passes; holds no slot:
        :func:`~rsi_common.runtime.host_subagents.host_wait`."""
        return host_wait(self.sessions, self.client.redis, self.params, handles, timeout_s, mode)

    def set_subagent_spec(self, root: str, name: str, spec: Mapping[str, Any] | None) -> dict[str, Any]:
        """Add, replace or (``None``) remove one spec of ``root``'s catalog (D12):
        :func:`~rsi_common.runtime.host_subagents.set_spec`."""
        return set_spec(self.sessions, root, name, spec, actor=self.actor)

    # --- spend --------------------------------------------------------------------------------

    def spend(self, scope: str, day: str | None = None) -> dict[str, Any]:
        """The day's charges of a tree (``scope`` = its root) or, for a non-root agent, of that agent."""
        with self.sessions() as s:
            row = get_runtime(s, scope)
            when = day or db_day(s)
            if row.parent_id is None:
                totals = asdict(tree_totals(s, scope, when))
                totals["agent_tokens"] = agent_totals(s, scope, when)
                caps = asdict(resolve_caps(self.params, row.caps))
                return {"scope": "tree", "root": scope, "day": when, "spent": totals, "caps": caps}
            return {"scope": "agent", "agent": scope, "day": when, "tokens": agent_totals(s, scope, when)}

    def set_caps(self, root: str, caps: Mapping[str, Any] | None) -> dict[str, Any]:
        """Override the daily caps of ``root``'s tree (keys of ``CAP_FIELDS``; ``None`` clears)."""
        check_object(caps, "caps", nullable=True)
        resolve_caps(self.params, caps)
        with self.sessions.begin() as s:
            row = get_runtime(s, root)
            if row.parent_id is not None:
                raise InvalidInput(f"caps are set on a root; {root!r} is a child of {row.parent_id!r}")
            row.caps = dict(caps) if caps else None
            return {"root": root, "caps": row.caps, "keys": list(CAP_FIELDS)}

    # --- refinement (docs/runtime/refine.md) ----------------------------------------------------

    def refine(self, agent: str, focus: str = "", criteria: Sequence[str] = (),
               requested_by: str = "operator") -> dict[str, Any]:
        """Request a refine run of ``agent``: ``{scheduled, reason, request}``. At most 5 criteria of
        at most 500 characters; ``InvalidInput`` names the field and nothing is stored."""
        request = check_request(focus, criteria, requested_by)
        out = schedule_refine(self.sessions, self.client.coord, self.client.dispatcher, agent, request,
                              actor=self.actor)
        return out.to_json()

    def refine_request(self, agent: str, focus: str) -> dict[str, Any]:
        """The agent's own ``refine_request(focus)`` (profile ``refine``, once per
        ``REFINE_COOLDOWN_S``; never criteria): ``{scheduled, reason}``."""
        def start(request: RefineRequest) -> Scheduled:
            return schedule_refine(self.sessions, self.client.coord, self.client.dispatcher, agent, request,
                                   actor=agent)
        return agent_refine(self.sessions, self.client.redis, self.params.refine_cooldown_s, start, agent,
                            focus).to_json()

    def taint(self, agent: str, io: str, reason: str) -> dict[str, Any]:
        """Taint the world of ``agent``'s turn ``io``: it never enters a round again."""
        with self.sessions.begin() as s:
            return {"agent": agent, "io": io, "tainted": taint(s, agent, io, reason, actor=self.actor)}

    def revoke(self, agent: str, version: str, reason: str, taint_evidence: bool = False) -> dict[str, Any]:
        """Revoke ``version``; a current version rolls back to its parent (a run in flight ends
        ``kept``); ``taint_evidence`` taints the adopting run's worlds."""
        with self.sessions.begin() as s:
            out = revoke(s, agent, version, reason, taint_evidence=taint_evidence, actor=self.actor)
        if out["rolled_back_to"] is not None:
            self.client._changed(agent)
        return out

    def audit(self, agent: str) -> list[dict[str, Any]]:
        """Per version: origin, requester, focus, run, S★, δ, ΔS, ΔC, diff, evidence, revocation."""
        with self.sessions() as s:
            return audit(s, agent)
