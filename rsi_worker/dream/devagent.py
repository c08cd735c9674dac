"""The development agent: writes policy revisions and repairs them (docs/dream/cycle.md#development).

Each revision is one model call in the role ``dream_dev``; the prompt lists the earlier versions
(name, dev score V, stop reasons, the first batches of their replay traces), the revision number and,
when repairing, the sandbox's or the validator's refusal. The answer is the policy source in one
fenced ``python`` block (or the whole text). The sim's behaviour for the role is
:func:`sim_dev`: it reads the same section headers and writes parallel-refine variants.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rsi_common.llm.base import ModelClient, ModelRequest
from rsi_common.llm.sim import SimCall, SimClient, SimConfig, register_sim_role
from rsi_common.llm.sim.core import message_text, parse_sections, text_reply
from rsi_worker.dream.policies import builtin

__all__ = ["DEV_ROLE", "SECTIONS", "dev_client", "extract_code", "revision_prompt", "sim_dev"]

DEV_ROLE = "dream_dev"
SECTIONS = ("## REVISION", "## VERSIONS", "## REPAIR", "## INTERFACE")
_SYSTEM = (
    "You improve an exploration policy for a branch x attempt search. Write a Python module defining "
    "plan_grid(ctx) -> {branch_count, refine_count} and choose(view, beta) -> list of cell ids ([] stops). "
    "Imports only from math, itertools, functools, collections, heapq, bisect, statistics, dataclasses, "
    "typing, enum; no names starting with __; no open/eval/exec/getattr. Answer with one ```python block."
)
_INTERFACE = (
    "view.revealed(), view.legal(), view.width(), view.baseline(), view.round(), view.rounds_left(), "
    "view.n_valid(), view.n_total(); cells are dicts with id, branch, attempt, parent, score, evaluated, "
    "valid, fail_class, error, delta_vs_baseline, delta_vs_parent. The value is best normalised score "
    "- cost per revealed cell + a bonus for parallel batches."
)
_FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)
VARIANTS: tuple[tuple[int, float, bool, tuple[int, int] | None], ...] = (
    (1, 0.0, False, None),
    (2, 0.0, False, (8, 2)),
    (1, 0.005, True, (6, 3)),
    (0, 0.0, False, None),
    (3, 0.002, True, (8, 3)),
    (2, 0.01, False, (5, 4)),
)
"""(PATIENCE, GAIN, FRESH_FIRST, LIVE_GRID) of the sim's parallel-refine variants."""


def revision_prompt(revision: int, versions: Sequence[dict[str, Any]], repair: str | None) -> ModelRequest:
    """The request of one revision (or its repair)."""
    listing = json.dumps(list(versions), ensure_ascii=False, indent=1)[:60_000]
    text = "\n".join(
        [
            f"{SECTIONS[0]}:",
            str(revision),
            f"{SECTIONS[1]}:",
            listing,
            f"{SECTIONS[2]}:",
            repair or "none",
            f"{SECTIONS[3]}:",
            _INTERFACE,
        ]
    )
    return ModelRequest(
        model="", system=_SYSTEM, messages=[{"role": "user", "content": text}], max_tokens=4096, seed=revision
    )


def extract_code(text: str) -> str:
    """The first fenced block, else the whole text."""
    m = _FENCE.search(text)
    return (m.group(1) if m else text).strip() + "\n"


def sim_dev(call: SimCall) -> list[dict[str, Any]]:
    """The sim's development agent: a parallel-refine variant not tried yet (seeded), sometimes with
    an import the sandbox refuses on the first try of a revision, fixed on repair."""
    text = message_text(call.request.messages[-1])
    sec = parse_sections(text, SECTIONS)
    repairing = sec.get(SECTIONS[2], "none").strip() != "none"
    try:
        tried = {v.get("name") for v in json.loads(sec.get(SECTIONS[1], "[]") or "[]") if isinstance(v, dict)}
    except ValueError:  # a listing cut at its size limit
        tried = set()
    free = [i for i in range(len(VARIANTS)) if f"parallel_refine_v{i}" not in tried] or list(
        range(len(VARIANTS))
    )
    pick = free[int(call.draw("variant") * len(free))]
    patience, gain, fresh, grid = VARIANTS[pick]
    src = builtin("parallel_refine").source
    src = src.replace("PATIENCE = 1", f"PATIENCE = {patience}").replace("GAIN = 0.0", f"GAIN = {gain}")
    src = src.replace("FRESH_FIRST = False", f"FRESH_FIRST = {fresh}")
    src = src.replace("LIVE_GRID = None ", f"LIVE_GRID = {grid} ")
    src = f"# name: parallel_refine_v{pick}\n" + src
    if not repairing and call.draw("slip") < 0.35:
        src = "import os\n" + src
    return text_reply(f"```python\n{src}```")


register_sim_role(DEV_ROLE, sim_dev)


def dev_client(provider: str, model: str, sim: SimConfig | None = None) -> ModelClient:
    """The development agent's client: the sim in role ``dream_dev``, else the provider's client
    built by the caller (real clients ignore the role)."""
    if provider != "sim":
        raise ValueError("dev_client builds the sim only; pass a real ModelClient to the cycle")
    return SimClient(model or "sim-1", sim or SimConfig(), role=DEV_ROLE)
