"""The sim model under a goal (docs/formats.md#sim-5-the-agent-runtime, R9.3), role ``policy``.

The goal is read from the turn's note ``Goal: <objective> (tokens used <u> of <budget>)`` (the
turn context or the system prompt). It applies before every other policy rule:

* an objective containing a word starting with ``stall`` always gets the same answer
  (:data:`STALL_ANSWER`; ``install`` does not count);
* an objective containing ``finish after <n> turns``: continuation ``i`` (the input's
  ``(continuation <i> of <max>)``; 0 without one) answers ``progress <i>``; at ``i ≥ n`` the sim calls
  ``goal_complete`` with ``summary="done"`` when it is offered and not yet called in this turn, then
  answers ``done``;
* any other objective leaves the turn to the ordinary policy.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from rsi_common.llm.base import ModelRequest, canonical_json
from rsi_common.llm.sim.core import Turn, text_reply

__all__ = ["STALL_ANSWER", "goal_reply"]

STALL_ANSWER = "still thinking about the goal"
_GOAL = re.compile(r"Goal: (.+?) \(tokens used \d+ of \d+\)")
_FINISH = re.compile(r"\bfinish after (\d+) turns?\b", re.IGNORECASE)
_CONTINUATION = re.compile(r"\(continuation (\d+) of \d+\)")
_STALL = re.compile(r"\bstall", re.IGNORECASE)  # "stall", "stalled"; not "install"


def goal_reply(request: ModelRequest, turn: Turn) -> list[dict[str, Any]] | None:
    """The reply under a goal (module docstring), or ``None`` when the goal rules do not apply."""
    m = _GOAL.search("\n".join((turn.context, request.system)))
    if m is None:
        return None
    objective = m.group(1)
    if _STALL.search(objective):
        return text_reply(STALL_ANSWER)
    finish = _FINISH.search(objective)
    if finish is None:
        return None
    cont = _CONTINUATION.search(turn.input)
    i = int(cont.group(1)) if cont else 0
    if i < int(finish.group(1)):
        return text_reply(f"progress {i}")
    offered = any(t.get("name") == "goal_complete" for t in request.tools or [])
    called = any(u.get("name") == "goal_complete" for u in turn.tool_uses)
    if offered and not called:
        key = canonical_json([request.messages, "goal_complete"]).encode("utf-8")
        digest = hashlib.sha256(key).hexdigest()
        return [{"type": "tool_use", "id": "toolu_sim_" + digest[:20], "name": "goal_complete",
                 "input": {"summary": "done"}}]
    return text_reply("done")
