"""What a host process and a worker share (docs/dev/layout.md).

``from rsi_common import Agent`` is the host's easy path (docs/host/agent.md). The attribute is
loaded on first use, so importing any other module of the package stays as light as before.
The turn checks run compiled when built, else from their source (:mod:`rsi_common.compiled`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rsi_common.compiled import use_source

use_source()  # the turn checks' Python source unless a current compiled build is present

if TYPE_CHECKING:
    from rsi_common.agent import Agent

__all__ = ["Agent"]


def __getattr__(name: str) -> Any:
    if name == "Agent":
        from rsi_common.agent import Agent

        return Agent
    raise AttributeError(f"module 'rsi_common' has no attribute {name!r}")
