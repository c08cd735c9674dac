"""The sim model's behaviours for the roles whose prompts this package lays out
(docs/formats.md#sim-4-the-roles).

Each behaviour reads its prompt by the header constants the prompt builder beside it writes, so a
layout and its reader change together: ``analyst`` (:mod:`rsi_worker.roles.analyst`), ``proposer``
(:mod:`rsi_worker.roles.proposer_context`) and ``critic`` (:mod:`rsi_worker.roles.critic`).
:func:`register_sim_behaviours` adds them to the sim's role registry
(:mod:`rsi_common.llm.sim.registry`); ``rsi_worker.roles`` calls it when it is imported.
"""

from __future__ import annotations

from collections.abc import Mapping

from rsi_common.llm.sim import SimHandler, register_sim_role
from rsi_worker.roles.sim.analyst import analyst
from rsi_worker.roles.sim.critic import critic
from rsi_worker.roles.sim.digester import digester, reporter
from rsi_worker.roles.sim.proposer import proposer

__all__ = ["SIM_BEHAVIOURS", "register_sim_behaviours"]

SIM_BEHAVIOURS: Mapping[str, SimHandler] = {
    "analyst": analyst, "proposer": proposer, "critic": critic, "digester": digester, "reporter": reporter,
}
"""Role → sim behaviour, for the roles laid out in :mod:`rsi_worker.roles`."""


def register_sim_behaviours() -> None:
    """Register :data:`SIM_BEHAVIOURS` with the sim (idempotent)."""
    for role, handler in SIM_BEHAVIOURS.items():
        register_sim_role(role, handler)
