"""The host and operator API of goals, heartbeats and autonomy (docs/runtime/goals.md), mixed into
:class:`~rsi_common.runtime.host.RuntimeClient`. Every method validates its input and raises
:class:`~rsi_common.errors.InvalidInput` naming the field; nothing is stored on a refusal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.client import RsiClient
from rsi_common.db.runtime_models import AutonomyRow
from rsi_common.db.sqltypes import db_now
from rsi_common.runtime import autonomy, goals, heartbeats
from rsi_common.runtime.tree import get_runtime

__all__ = ["GoalsHostMixin"]


class GoalsHostMixin:
    """``set_goal``, ``update_goal``, ``goal``, ``add_heartbeat``, ``update_heartbeat``,
    ``start_autonomy``, ``stop_autonomy``, ``autonomy``."""

    client: RsiClient
    sessions: sessionmaker[Session]
    actor: str
    wake: Callable[[str, str], None]

    @property
    def _checks(self) -> str | None:
        return self.client.settings.check_factory

    # --- goals --------------------------------------------------------------------------------

    def set_goal(self, agent: str, objective: str, token_budget: int, check: str | None = None
                 ) -> dict[str, Any]:
        """Set the agent's goal (at most one ``active`` or ``paused`` goal per agent)."""
        with self.sessions.begin() as s:
            return goals.goal_json(goals.set_goal(s, agent, objective, token_budget, check,
                                                  check_factory=self._checks, actor=self.actor))

    def update_goal(self, agent: str, *, status: str | None = None, objective: str | None = None,
                    token_budget: int | None = None) -> dict[str, Any]:
        """Pause (``paused``), resume (``active``) or cancel (``cancelled``) the live goal, or change its
        objective or token budget."""
        with self.sessions.begin() as s:
            return goals.goal_json(goals.update_goal(s, agent, status=status, objective=objective,
                                                     token_budget=token_budget, actor=self.actor))

    def goal(self, agent: str) -> dict[str, Any] | None:
        """The agent's live goal, else its latest one (``None``: never had one)."""
        with self.sessions() as s:
            get_runtime(s, agent)
            row = goals.latest_goal(s, agent)
            return goals.goal_json(row) if row is not None else None

    # --- heartbeats ---------------------------------------------------------------------------

    def add_heartbeat(self, agent: str, instruction: str, *, every_s: int | None = None,
                      cron: str | None = None, label: str = "heartbeat", session: str = "main"
                      ) -> dict[str, Any]:
        """A heartbeat posting ``[heartbeat <label>] <instruction>`` every ``every_s ≥ 60`` seconds or
        on a 5-field UTC ``cron``."""
        with self.sessions.begin() as s:
            now = s.execute(sa.select(db_now())).scalar_one()
            return heartbeats.heartbeat_json(heartbeats.add_heartbeat(
                s, agent, instruction, every_s=every_s, cron=cron, label=label, session=session, now=now,
                actor=self.actor))

    def update_heartbeat(self, heartbeat: str, *, status: str | None = None, instruction: str | None = None,
                         every_s: int | None = None, cron: str | None = None, label: str | None = None
                         ) -> dict[str, Any]:
        """Pause (``paused``), resume (``active``), delete (``deleted``) or change a heartbeat."""
        with self.sessions.begin() as s:
            now = s.execute(sa.select(db_now())).scalar_one()
            return heartbeats.heartbeat_json(heartbeats.update_heartbeat(
                s, heartbeat, status=status, instruction=instruction, every_s=every_s, cron=cron, label=label,
                now=now, actor=self.actor))

    # --- autonomy -----------------------------------------------------------------------------

    def start_autonomy(self, agent: str, budget: dict[str, Any] | None = None, check: str | None = None,
                       session: str = "main") -> dict[str, Any]:
        """Start the agent's autonomous loop (budget keys ``max_turns`` 12, ``max_tokens`` 80,000,
        ``max_usd`` null, ``max_wall_s`` 1,800) and wake its first turn."""
        with self.sessions.begin() as s:
            out = autonomy.autonomy_json(autonomy.start_autonomy(
                s, agent, budget, check, check_factory=self._checks, actor=self.actor, session=session))
        self.wake(agent, session)
        return out

    def stop_autonomy(self, agent: str) -> dict[str, Any]:
        """Stop the agent's loop (``stopped/operator``)."""
        with self.sessions.begin() as s:
            return autonomy.autonomy_json(autonomy.stop_autonomy(s, agent, actor=self.actor))

    def autonomy(self, agent: str) -> dict[str, Any] | None:
        """The agent's running loop, else the one that finished last (``None``: never started one)."""
        with self.sessions() as s:
            get_runtime(s, agent)
            running_first = sa.case((AutonomyRow.status == "running", 0), else_=1)
            row = s.execute(sa.select(AutonomyRow).where(AutonomyRow.agent_id == agent).order_by(
                running_first, AutonomyRow.finished_at.desc(), AutonomyRow.started_at.desc())
                .limit(1)).scalar_one_or_none()
            return autonomy.autonomy_json(row) if row is not None else None
