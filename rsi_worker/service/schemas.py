"""Response models of the JSON API (they make the OpenAPI document; request bodies are checked by the
library's input boundary, not by these models)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

__all__ = ["AgentOut", "AgentsOut", "HarnessOut", "ProgressOut", "RecordedTurnOut", "TokenOut"]


class RecordedTurnOut(BaseModel):
    """What recording did (``rsi_common.client.RecordedTurn``)."""

    world_id: str | None
    io_id: str
    seq: int | None
    replayable: bool
    dispatched: Literal["enqueued", "pending", "deferred", "frozen", "skipped", "off"]
    """``deferred``: Redis or the broker was down; the sweeper triggers the run later."""
    task_id: str | None = None


class HarnessOut(BaseModel):
    """The harness of the agent's next turn."""

    agent_id: str
    version: str
    """Content-addressed version (also the ``ETag``)."""
    label: Literal["fixed", "agent", "h0"]
    """``fixed``: the service's ``RSI_HARNESS_DIR`` pin; ``agent``: a stored version; ``h0``."""
    payload: dict[str, Any]
    """``{manifest, files, version}`` (``rsi-harness/1``)."""


class LastOutcome(BaseModel):
    status: str
    reason: str | None
    finished_at: str | None


class AgentOut(BaseModel):
    """One agent with its status (idle / running / frozen / pinned)."""

    agent_id: str
    status: Literal["idle", "running", "frozen", "pinned"]
    current_version: str | None
    """``None`` = H0."""
    frozen: bool
    last_outcome: LastOutcome | None
    adoptions: int
    updated_at: str | None
    spend_today_tokens: int | None = None
    """Consolidation tokens of the agent today (UTC), from the spend counters."""


class AgentsOut(BaseModel):
    agents: list[AgentOut]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; ``None`` on the last one."""


class ProgressOut(BaseModel):
    """Where a run is: its phase and its stored trials of that phase out of the planned ones."""

    run_id: str
    status: str
    phase: str
    trials_done: int
    trials_total: int


class TokenOut(BaseModel):
    """A token as listed (never the token itself)."""

    id: str
    name: str
    scopes: list[str]
    agent_prefix: str | None
    rate_per_min: int | None
    created_by: str | None
    created_at: str | None
    last_used_at: str | None
    revoked_at: str | None
