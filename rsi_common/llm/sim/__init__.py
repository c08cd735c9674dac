"""The sim model: a deterministic, offline stand-in for a real LLM (docs/formats.md).

* :mod:`~rsi_common.llm.sim.client` — :class:`SimClient`: seed, latency, injected errors, usage;
* :mod:`~rsi_common.llm.sim.registry` — the role-behaviour registry (:data:`SIM_ROLES`,
  :func:`register_sim_role`);
* :mod:`~rsi_common.llm.sim.core` — the call, the turn and the section parser every behaviour uses;
* :mod:`~rsi_common.llm.sim.traits` — the answer traits: triggers, transforms, detectors;
* :mod:`~rsi_common.llm.sim.policy` — the agent's turn (role ``policy``);
* :mod:`~rsi_common.llm.sim.roles` — the generic roles ``judge``, ``signal`` and ``compact``.

The behaviours of ``analyst``, ``proposer`` and ``critic`` live beside the prompt layouts they read,
in ``rsi_worker.roles.sim``, and are registered when ``rsi_worker.roles`` is imported.
"""

from __future__ import annotations

from rsi_common.config import SimConfig
from rsi_common.llm.sim.client import SimClient, call_seed, input_tokens, output_tokens
from rsi_common.llm.sim.core import SimCall, SimHandler
from rsi_common.llm.sim.registry import SIM_ROLES, register_sim_role
from rsi_common.llm.sim.traits import (
    DETECTORS,
    TRAITS,
    TRIGGERS,
    detect_brief,
    detect_bullets,
    detect_cite,
    detect_korean,
    detect_one_line_reco,
    detect_table,
    detect_units,
    detected_traits,
)

__all__ = [
    "DETECTORS",
    "SIM_ROLES",
    "TRAITS",
    "TRIGGERS",
    "SimCall",
    "SimClient",
    "SimConfig",
    "SimHandler",
    "call_seed",
    "detect_brief",
    "detect_bullets",
    "detect_cite",
    "detect_korean",
    "detect_one_line_reco",
    "detect_table",
    "detect_units",
    "detected_traits",
    "input_tokens",
    "output_tokens",
    "register_sim_role",
]
