"""A registered agent's consolidation and refine runs in its tree's accounting (docs/runtime/accounting.md,
``run:{run}`` charges; docs/runtime/refine.md).

* :func:`charge_run` — at the run's final write, in its transaction: one ``rsi_spend`` row keyed
  ``run:{run}`` with the run's role and replay tokens, charged to the tree's root (a redelivered final
  write charges nothing: the key is unique). Agents that are not registered are left alone.
* :func:`tree_exhausted` — ``"tree budget exhausted"`` when the tree's tokens or USD for the day (or
  the agent's own tokens) are at their caps: the run ends ``skipped`` and its signals stay fresh.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from rsi_common.config import RuntimeParams
from rsi_common.db.runtime_models import AgentRuntimeRow
from rsi_common.runtime.caps import resolve_caps
from rsi_common.runtime.spend import Charge, agent_totals, charge, db_day, run_key, tree_totals

__all__ = ["TREE_EXHAUSTED", "charge_root", "charge_run", "run_root", "tree_exhausted"]

TREE_EXHAUSTED = "tree budget exhausted"


def charge_run(session: Session, agent: str, run_id: str, tokens: int) -> bool:
    """Charge ``tokens`` of run ``run_id`` to ``agent``'s root (module docstring); True if inserted."""
    root = run_root(session, agent)
    if root is None:
        return False
    return charge_root(session, root, agent, run_id, tokens)


def run_root(session: Session, agent: str) -> str | None:
    """The root of ``agent``'s tree, ``None`` for an agent that is not registered. A root never
    changes once the agent's runtime row exists, so the final write reads it before its write turn
    (docs/performance/consolidation.md#short-write-transactions)."""
    rt = session.get(AgentRuntimeRow, agent)
    return None if rt is None else str(rt.root_id)


def charge_root(session: Session, root: str, agent: str, run_id: str, tokens: int,
                day: str | None = None) -> bool:
    """:func:`charge_run` with the root read before (:func:`run_root`) and the UTC ``day`` by the
    database clock when the caller read it (default: read here); True if inserted."""
    return charge(session, Charge(run_key(run_id), "run", root, agent, tokens=max(0, int(tokens))), day)


def tree_exhausted(session: Session, params: RuntimeParams, agent: str) -> str | None:
    """:data:`TREE_EXHAUSTED` when a token or USD cap of the agent's tree is spent, else ``None``."""
    rt = session.get(AgentRuntimeRow, agent)
    if rt is None:
        return None
    root = session.get(AgentRuntimeRow, rt.root_id)
    caps = resolve_caps(params, root.caps if root is not None else None)
    day = db_day(session)
    spent = tree_totals(session, rt.root_id, day)
    over = ((caps.tokens is not None and spent.tokens >= caps.tokens)
            or (caps.usd is not None and spent.usd >= caps.usd)
            or (caps.agent_tokens is not None and agent_totals(session, agent, day) >= caps.agent_tokens))
    return TREE_EXHAUSTED if over else None
