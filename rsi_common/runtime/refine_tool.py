"""The agent's ``refine_request(focus)`` tool (docs/runtime/refine.md#requests).

Offered when the profile has ``refine``. The call is checked and the cooldown taken at once
(``SET NX rsi:{a}:refine_cd`` for ``REFINE_COOLDOWN_S``); its result is ``{scheduled, reason}``
(``scheduled: false`` during the cooldown). The accepted request is kept on the turn's tool context
and started by :func:`start_refines` after the turn's commit, so the refine run sees the turn's
world. The agent gives a focus only: criteria never come from the agent (invariant 14).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rsi_common.client import RsiClient
from rsi_common.kernel.types import ToolDef
from rsi_common.runtime.refine import RefineRequest, Scheduled, agent_refine, schedule_refine

__all__ = ["refine_tools", "start_refines"]

FAMILY = "rsi.runtime"


def refine_tools(ctx: Any) -> list[ToolDef]:
    """``[refine_request]`` when ``ctx.refine`` (a ``ToolContext``), else ``[]``."""
    if not getattr(ctx, "refine", False):
        return []

    def later(request: RefineRequest) -> Scheduled:
        ctx.refines.append(request)
        return Scheduled(True, "the refine starts after this turn commits", request)

    def do_refine(args: dict[str, Any]) -> Any:
        out = agent_refine(ctx.factory, ctx.redis, ctx.params.refine_cooldown_s, later, ctx.agent,
                           args.get("focus", ""))
        return json.dumps(out.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    schema = {"type": "object", "properties": {"focus": {"type": "string"}}, "required": ["focus"]}
    return [ToolDef("refine_request", "Ask for a measured refinement of your harness toward a focus.",
                    schema, family=FAMILY, executor=do_refine)]


def start_refines(client: RsiClient, agent: str, requests: Sequence[RefineRequest]) -> list[Scheduled]:
    """Start the refines a committed turn requested (each takes or waits for the lease)."""
    return [schedule_refine(client._sessions, client.coord, client.dispatcher, agent, r, actor=agent)
            for r in requests]
