"""``PromptCacheComponent`` (kind ``config``): prompt-cache points (docs/formats.md §5.6 *Config*)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from rsi_common.kernel.components.base import Component

if TYPE_CHECKING:
    from rsi_common.kernel.runtime import TurnRuntime
    from rsi_common.llm import ModelRequest

__all__ = ["PromptCacheComponent"]


class PromptCacheComponent(Component):
    """Sets the request's ``cache_points`` when the host enables prompt caching.

    Only when kwarg ``enable_prompt_cache`` is true (then ``strategy`` is read): ``"system"`` →
    ``["system"]``; anything else → ``["system", "tools", "last_user"]``. Clients without prompt
    caching ignore cache points.
    """

    KIND: ClassVar[str] = "config"
    PARAMS: ClassVar[dict[str, tuple[Any, str]]] = {
        "strategy": ("aggressive", "'system': cache the system prompt only; else also tools and last user"),
    }

    def apply_request(self, rt: TurnRuntime, request: ModelRequest) -> ModelRequest:
        """The request with cache points set (unchanged without ``enable_prompt_cache``)."""
        if not rt.kwarg("enable_prompt_cache"):
            return request
        points = ["system"] if self.param_str("strategy") == "system" else ["system", "tools", "last_user"]
        return dataclasses.replace(request, cache_points=points)
