"""The outcome of one consolidation run (docs/algorithm/consolidation.md §3.1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ConsolidationResult", "Status", "merge_usage"]

Status = Literal["recorded", "kept", "failed", "adopted", "skipped", "interrupted"]
"""``recorded``/``kept``/``failed``/``adopted`` are results (docs/algorithm/consolidation.md §3.3);
``skipped`` and
``interrupted`` are host-level run statuses (docs/algorithm/consolidation.md §3.12)."""


def merge_usage(into: dict[str, dict[str, int]], more: Mapping[str, Mapping[str, int]] | None) -> None:
    """Add per-role usage ``{role: {calls, input_tokens, output_tokens}}`` into ``into``."""
    for role, u in (more or {}).items():
        slot = into.setdefault(role, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        for key in ("calls", "input_tokens", "output_tokens"):
            slot[key] += int(u.get(key, 0))


@dataclass
class ConsolidationResult:
    """What a run decided. :meth:`summary` (no state, no payload) is stored in ``rsi_runs.result``."""

    status: Status
    reason: str
    state: dict[str, Any] | None = None
    """The state to save, or ``None`` to leave the stored one (``failed``, ``skipped``)."""
    start_version: str | None = None
    version: str | None = None
    adopted: bool = False
    payload: dict[str, Any] | None = None
    round: dict[str, Any] = field(default_factory=dict)
    signals: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    run_id: str | None = None
    error: dict[str, Any] | None = None
    spend: dict[str, Any] = field(default_factory=dict)
    """Tokens spent (``tokens``, ``role_tokens``, ``replay_tokens``) and, when a spend cap stopped the
    run, ``capped`` with today's figures (docs/consolidation/spend.md)."""
    skipped_worlds: dict[str, str] = field(default_factory=dict)
    """World id → why the run left that stored row out (``docs/operations/failure-recovery.md``)."""

    def summary(self) -> dict[str, Any]:
        """Every field except ``state`` and ``payload``."""
        out: dict[str, Any] = {
            "status": self.status,
            "reason": self.reason,
            "start_version": self.start_version,
            "version": self.version,
            "adopted": self.adopted,
            "round": self.round,
            "signals": self.signals,
            "seconds": round(self.seconds, 3),
            "usage": self.usage,
            "spend": self.spend,
        }
        if self.run_id is not None:
            out["run_id"] = self.run_id
        if self.error is not None:
            out["error"] = self.error
        if self.skipped_worlds:
            out["skipped_worlds"] = dict(self.skipped_worlds)
        return out
