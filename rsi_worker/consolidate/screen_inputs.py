"""What the privilege stage of the gate reads about the agent (docs/runtime/refine.md#privilege-screen):
its tool grant (PV1), its toolset's forbidden terms (PV3) and its revoked versions and their added
lines (PV4). Read once per draft from SQL; an agent that is not registered with the runtime has no
grant (only the incumbent's ``tools`` lists are allowed) and the default toolset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rsi_common.db.models import HarnessRow
from rsi_common.db.runtime_models import AgentRuntimeRow
from rsi_common.harness import h0, materialize
from rsi_common.runtime.toolsets import forbidden_terms
from rsi_worker.gate.added import added_texts

__all__ = ["ScreenInputs", "screen_inputs"]


@dataclass(frozen=True)
class ScreenInputs:
    """The agent's side of the privilege screen (JSON-able; stored with the draft context)."""

    granted_tools: tuple[str, ...] | None = None
    forbidden_terms: tuple[str, ...] = ()
    revoked_lines: tuple[str, ...] = ()
    revoked_versions: tuple[str, ...] = ()
    focus: str = ""
    """The refine run's focus line for the proposer (``""`` outside a refine)."""

    def to_json(self) -> dict[str, Any]:
        return {"granted_tools": None if self.granted_tools is None else list(self.granted_tools),
                "forbidden_terms": list(self.forbidden_terms), "revoked_lines": list(self.revoked_lines),
                "revoked_versions": list(self.revoked_versions), "focus": self.focus}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> ScreenInputs:
        d = d or {}
        grant = d.get("granted_tools")
        return cls(None if grant is None else tuple(str(t) for t in grant),
                   tuple(str(t) for t in d.get("forbidden_terms") or ()),
                   tuple(str(t) for t in d.get("revoked_lines") or ()),
                   tuple(str(t) for t in d.get("revoked_versions") or ()), str(d.get("focus") or ""))


def _revoked(session: Session, agent_id: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    rows = session.execute(sa.select(HarnessRow).where(HarnessRow.agent_id == agent_id,
                                                       HarnessRow.revoked_at.is_not(None))).scalars().all()
    versions: list[str] = []
    lines: list[str] = []
    for row in rows:
        versions.append(row.version)
        try:
            harness = materialize(row.payload)
            parent_row = session.execute(sa.select(HarnessRow).where(
                HarnessRow.agent_id == agent_id, HarnessRow.version == row.parent_version)
            ).scalar_one_or_none()
            parent = materialize(parent_row.payload) if parent_row is not None else h0()
        except Exception:
            continue
        for added in added_texts(parent, harness):
            lines += [ln for ln in added.text.splitlines() if ln.strip()]
    return tuple(versions), tuple(dict.fromkeys(lines))


def screen_inputs(session: Session, agent_id: str, focus: str = "") -> ScreenInputs:
    """The privilege screen's inputs for ``agent_id`` (module docstring)."""
    rt = session.get(AgentRuntimeRow, agent_id)
    profile = dict(rt.profile or {}) if rt is not None else {}
    grant = tuple(str(t) for t in profile.get("tools") or ()) if rt is not None else None
    versions, lines = _revoked(session, agent_id)
    return ScreenInputs(grant, forbidden_terms(str(profile.get("toolset") or "sim")), lines, versions, focus)
