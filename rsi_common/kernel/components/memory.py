"""``ArchiveMemoryComponent`` (kind ``memory``): retrieval and archiving (docs/formats.md §5.6 *Memory*)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, ClassVar

from rsi_common.kernel.components.base import Component

if TYPE_CHECKING:
    from rsi_common.kernel.components.protocols import Retriever
    from rsi_common.kernel.runtime import TurnRuntime

__all__ = ["ArchiveMemoryComponent"]


class ArchiveMemoryComponent(Component):
    """Gives the context component a retriever and archives the turn at slice end.

    ``retrieve`` is read only when a memory provider exists; ``archive`` only at slice end with a
    provider that is not a replay provider (``rsi_replay``) — so an edit of either param on an agent
    without memory is never read (docs/check-vectors.md §9.12 scenario 8). Archiving calls the provider's
    ``archive(messages)`` with a deep copy of this turn's messages (from the input on), when the
    provider has such a method.
    """

    KIND: ClassVar[str] = "memory"
    PARAMS: ClassVar[dict[str, tuple[Any, str]]] = {
        "retrieve": (True, "retrieve memory with the request text on the first iteration"),
        "archive": (True, "archive the turn's messages into the provider at the end of the turn"),
    }

    def retriever(self, rt: TurnRuntime) -> Retriever | None:
        """The provider's ``retrieve(query, timeout_s)``, or None (no provider or retrieval off)."""
        provider = rt.memory
        if provider is None or not self.param_bool("retrieve"):
            return None
        return provider.retrieve

    def on_slice_end(self, rt: TurnRuntime) -> None:
        """Archive this turn's messages (never with a replay provider)."""
        provider = rt.memory
        if provider is None or rt.is_replay or not self.param_bool("archive"):
            return
        archive = getattr(provider, "archive", None)
        if callable(archive):
            archive(copy.deepcopy(rt.messages[rt.turn_start:]))
