"""Consolidation spend caps (docs/consolidation/spend.md).

Every token a consolidation spends — role calls (signal reader, analyst, proposer, critic, judge) and
the policy calls of its replays — is added to two Redis counters keyed by UTC day: the agent's and
the cluster's (``rsi_common.coord.spend_key``). A run that finds a cap reached before it starts ends
``skipped`` with the figures; one that reaches it mid-way stops at its next step (trials skip their
model calls), also ``skipped``: no adoption, the state unchanged, the reason recorded. Counting
happens when the usage is produced, once per stored result (a redelivered task that finds its result
stored charges nothing).

Redis failures never fail a run here: charging is logged and skipped, checking lets the run go on
(the lease needs Redis anyway).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rsi_common.coord import Lease
from rsi_common.handoff import COORD_ERRORS
from rsi_worker.consolidate.context import Deps

__all__ = ["Spend", "charge", "over_cap", "renew_over_cap", "spend_reached", "spend_summary", "today",
           "usage_tokens"]

log = logging.getLogger(__name__)


def today() -> str:
    """The UTC day of the counters, ``YYYY-MM-DD``."""
    return datetime.now(UTC).strftime("%Y-%m-%d")


def usage_tokens(usage: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Input plus output tokens of a per-role usage ``{role: {calls, input_tokens, output_tokens}}``."""
    return sum(int(u.get("input_tokens", 0)) + int(u.get("output_tokens", 0)) for u in (usage or {}).values())


def charge(deps: Deps, agent: str, tokens: int) -> None:
    """Add ``tokens`` to today's counters of ``agent`` and of the cluster."""
    if tokens <= 0:
        return
    try:
        deps.coord.spend_add(agent, tokens, today())
    except COORD_ERRORS as exc:
        log.warning("agent %s: %s tokens not counted (%s)", agent, tokens, type(exc).__name__)


@dataclass(frozen=True)
class Spend:
    """Today's tokens of one agent and of the cluster, with the caps (0 = none)."""

    day: str
    agent: int
    cluster: int
    agent_cap: int
    cluster_cap: int

    def reason(self) -> str | None:
        """Why no more may be spent, or None."""
        if self.agent_cap and self.agent >= self.agent_cap:
            return f"agent spent {self.agent} of its {self.agent_cap} tokens for {self.day} (UTC)"
        if self.cluster_cap and self.cluster >= self.cluster_cap:
            return f"cluster spent {self.cluster} of its {self.cluster_cap} tokens for {self.day} (UTC)"
        return None

    def to_json(self) -> dict[str, Any]:
        return {"day": self.day, "agent": self.agent, "cluster": self.cluster, "agent_cap": self.agent_cap,
                "cluster_cap": self.cluster_cap}


def over_cap(deps: Deps, agent: str) -> Spend | None:
    """Today's spend when a cap is reached, else None (also None when no cap is set or Redis fails)."""
    p = deps.params
    if not (p.agent_daily_tokens or p.cluster_daily_tokens):
        return None
    day = today()
    try:
        a, c = deps.coord.spend(agent, day)
    except COORD_ERRORS as exc:
        log.warning("agent %s: spend not readable (%s); the run goes on", agent, type(exc).__name__)
        return None
    spend = Spend(day, a, c, p.agent_daily_tokens, p.cluster_daily_tokens)
    return spend if spend.reason() else None


def renew_over_cap(deps: Deps, lease: Lease) -> tuple[bool, Spend | None]:
    """``(deps.coord.renew(lease), over_cap(deps, lease.agent))`` in one Redis round trip when a cap is
    set (``Coordinator.renew_and_spend``). The renewal's errors raise as ``renew``'s; a spend that
    cannot be read counts as no cap reached, as in :func:`over_cap`."""
    p = deps.params
    if not (p.agent_daily_tokens or p.cluster_daily_tokens):
        return deps.coord.renew(lease), None
    day = today()
    renewed, spent = deps.coord.renew_and_spend(lease, day)
    return renewed, spend_reached(deps, lease.agent, day, spent)


def spend_reached(deps: Deps, agent: str, day: str, spent: tuple[int, int] | None) -> Spend | None:
    """The spend of ``(agent, cluster)`` tokens ``spent`` on ``day`` when a cap is reached, else None
    (also None, logged, when it could not be read: the run goes on)."""
    if spent is None:
        log.warning("agent %s: spend not readable; the run goes on", agent)
        return None
    p = deps.params
    spend = Spend(day, spent[0], spent[1], p.agent_daily_tokens, p.cluster_daily_tokens)
    return spend if spend.reason() else None


def spend_summary(usage: Mapping[str, Mapping[str, Any]], rows: Any) -> dict[str, int]:
    """The run record's ``spend``: role tokens, replay (policy) tokens and their sum."""
    role = usage_tokens(usage)
    replay = sum(int(r.get("tokens") or 0) for r in rows if r.get("source") == "replay")
    return {"tokens": role + replay, "role_tokens": role, "replay_tokens": replay}
