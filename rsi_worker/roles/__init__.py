"""The consolidation roles (docs/algorithm/consolidation.md §3.4, §3.7, §3.8, docs/formats.md §6): model
calls with fixed prompt layouts.

* :mod:`~rsi_worker.roles.signal` — the implicit-signal reader (docs/algorithm/consolidation.md §3.4);
* :mod:`~rsi_worker.roles.judge` — the criteria judge and its verdict key
  (docs/algorithm/consolidation.md §3.7);
* :mod:`~rsi_worker.roles.analyst` — evidence rendering and the analyst
  (docs/algorithm/consolidation.md §3.8);
* :mod:`~rsi_worker.roles.proposer` — the proposer's action protocol (docs/formats.md §6.1), with its context
  in
  :mod:`~rsi_worker.roles.proposer_context` and the constitution files in ``constitution/``;
* :mod:`~rsi_worker.roles.critic` — the review (docs/formats.md §6.2): the gate's pattern precheck
  (:mod:`rsi_worker.gate.precheck`), then the model.

The sim model's behaviours for the analyst, proposer and critic live beside these layouts in
:mod:`~rsi_worker.roles.sim` and read them by the same header constants; importing this package
registers them with the sim (``rsi_common.llm.sim``).
"""

from __future__ import annotations

from rsi_worker.roles.analyst import View, analyze, render, task_row
from rsi_worker.roles.critic import Review, recent_user_messages, review
from rsi_worker.roles.judge import CriteriaJudge, request_text, verdict_key
from rsi_worker.roles.proposer import (
    MAX_EDITS,
    MAX_TURNS,
    Proposal,
    ProposerSetup,
    propose,
    proposer_system,
    proposer_user,
    selection_text,
    validate_candidate,
    variant_brief,
)
from rsi_worker.roles.signal import implicit_signal
from rsi_worker.roles.sim import register_sim_behaviours

__all__ = [
    "MAX_EDITS",
    "MAX_TURNS",
    "CriteriaJudge",
    "Proposal",
    "ProposerSetup",
    "Review",
    "View",
    "analyze",
    "implicit_signal",
    "propose",
    "proposer_system",
    "proposer_user",
    "recent_user_messages",
    "render",
    "request_text",
    "review",
    "selection_text",
    "task_row",
    "validate_candidate",
    "variant_brief",
    "verdict_key",
]

register_sim_behaviours()
