"""The ``rsi-world/1`` schema as pydantic models, and its constants (docs/formats.md §4.1).

Closed objects (``extra="forbid"``, strict types) everywhere the spec fixes the shape; the dicts the
spec leaves open — content blocks, ``state.metadata``, ``plan.output_schema``, ``plan.kwargs`` values,
tool ``input``/``input_schema``, memory chunk ``metadata`` — accept any JSON. Capture, validation and
migration live in :mod:`rsi_common.world`, which re-exports the constants and :class:`World`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from rsi_common.boundary import MAX_DEFECTS
from rsi_common.credentials import safe_key

__all__ = [
    "CLIP_MARKER",
    "IMAGE_PLACEHOLDER",
    "IMAGE_TYPES",
    "MAX_RESULT_CHARS",
    "MAX_WORLD_BYTES",
    "SAFE_KWARGS",
    "WORLD_SCHEMA",
    "Content",
    "DefectRecord",
    "Memory",
    "MemoryChunk",
    "Message",
    "Outcome",
    "Plan",
    "State",
    "ToolCallRecord",
    "ToolDefRecord",
    "Tools",
    "World",
]

WORLD_SCHEMA = "rsi-world/1"
MAX_RESULT_CHARS = 32_000
"""Clip limit of tool-call contents and transcript strings, in characters."""
MAX_WORLD_BYTES = 2_000_000
"""Size limit of a replayable world: bytes of serialized UTF-8 (not MiB)."""
IMAGE_PLACEHOLDER = "[image omitted from the replay record]"
IMAGE_TYPES: tuple[str, ...] = ("image", "input_image")
CLIP_MARKER = "\n[… {n} characters cut …]\n"
"""Put between head and tail of a clipped string; ``n`` = characters removed beyond the limit."""
SAFE_KWARGS: tuple[str, ...] = (
    "name", "max_iterations", "temperature", "max_tokens", "thinking_level", "stream", "output_schema",
    "context_window_budget", "enable_compaction", "enable_prompt_cache", "repeat_stop_after",
    "prune_over_tokens", "turn_input_budget_tokens",
)
"""The only ``plan.kwargs`` a world keeps."""

def _content(v: Any) -> Any:
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in v):
        return v
    raise ValueError("must be a string or a list of content blocks {type, …}")


Content = Annotated[Any, AfterValidator(_content)]
"""A message/tool-result content: a string or a list of blocks (open dicts with a string ``type``)."""


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Message(_Closed):
    """One conversation message."""

    role: Literal["user", "assistant"]
    content: Content


class Plan(_Closed):
    """What the host asked for (``plan.*``)."""

    name: str
    """Agent/node name."""
    system_parts: list[Annotated[list[str], Field(min_length=2, max_length=2)]]
    """``[[part_id, text], ...]``: the agent's own instructions as given by the host."""
    output_schema: dict[str, Any] | None
    context_window_budget: int = Field(ge=0)
    """Tokens; 0 = unknown/unlimited."""
    enable_compaction: bool
    max_tokens: int | None
    turn_notes: list[str] = []
    kwargs: dict[str, Any] = {}
    """Only :data:`SAFE_KWARGS` that were present."""

    @field_validator("kwargs")
    @classmethod
    def _safe_kwargs(cls, v: dict[str, Any]) -> dict[str, Any]:
        unsafe = sorted(set(v) - set(SAFE_KWARGS))
        if unsafe:
            raise ValueError(f"kwargs not in SAFE_KWARGS: {', '.join(safe_key(k) for k in unsafe)}")
        return v


class State(_Closed):
    """Host session state before the turn."""

    session_id: str | None
    messages: list[Message]
    """Earlier conversation, not clipped."""
    metadata: dict[str, Any]
    """JSON-safe values only; no key starts with ``_``."""


class MemoryChunk(_Closed):
    """One retrieved memory chunk."""

    key: str
    source: str = ""
    content: str
    relevance_score: float | None = None
    metadata: dict[str, Any] = {}
    pinned: bool = False


class Memory(_Closed):
    """``present``: a memory provider existed; ``chunks``: the first-iteration retrieval, or null."""

    present: bool = False
    chunks: list[MemoryChunk] | None = None


class ToolDefRecord(_Closed):
    """A tool definition as the turn saw it (harness-contributed tools excluded)."""

    name: str = Field(min_length=1)
    description: str = ""
    input_schema: dict[str, Any] = {}
    core: bool = False
    activated: bool = False
    guide: bool = False
    live: bool = False
    """True only for kernel built-in live tools."""
    family: str | None = None
    read_only: bool = False


class ToolCallRecord(_Closed):
    """One executed tool call; ``content`` = the result the model saw, clipped."""

    tool_use_id: str
    name: str
    input: Any
    content: Content
    is_error: bool = False


class Tools(_Closed):
    """``tools.*``."""

    defs: list[ToolDefRecord]
    contributed: list[str] = []
    """Sorted names of tools the harness contributed."""
    calls: list[ToolCallRecord]


class Outcome(_Closed):
    """How the turn ended; ``steps`` = main model calls; ``transcript`` = the turn's new messages."""

    final_text: str
    status: str
    termination_reason: str | None
    policy_tokens: int = Field(ge=0)
    steps: int = Field(ge=0)
    transcript: list[Message]


class DefectRecord(_Closed):
    """A repair made by the input boundary (docs/security/input-boundary.md)."""

    path: str = Field(max_length=300)
    """The field path of the repaired string."""
    defect: Literal["lone_surrogate", "nul"]
    """What was replaced by U+FFFD: a lone surrogate, or U+0000."""


class RuntimeRecord(_Closed):
    """The optional ``runtime`` block of a world recorded by the agent runtime
    (docs/runtime/subagents.md#worlds-and-replay); absent from every other world."""

    root: str = Field(max_length=255)
    parent: str | None = Field(None, max_length=255)
    depth: int = Field(ge=0, le=3)
    session: str = Field(max_length=255)
    handle: str | None = Field(None, max_length=64)
    slice: int = Field(ge=1)
    request: str | list[dict[str, Any]] | None = None
    """Slices ≥ 2: the input that opened the logical turn (its first slice's input)."""
    messages_in: list[str] = Field(default_factory=list, max_length=64)
    """Ids of the messages this world consumed."""


class World(_Closed):
    """The ``rsi-world/1`` record (docs/formats.md §4.1), fields in the spec's order."""

    schema_: Literal["rsi-world/1"] = Field(alias="schema")
    replayable: bool
    """False only when the size limit was hit."""
    truncated: bool = False
    images_dropped: bool = False
    created_at: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
    """Turn start, UTC."""
    clock: float
    """Turn start, epoch seconds: recency key and the replay's clock."""
    agent_id: str
    io_id: str
    interaction_id: str
    harness_version: str | None
    provider: str
    model: str
    plan: Plan
    state: State
    input: Content
    memory: Memory = Memory()
    tools: Tools
    outcome: Outcome
    runtime: RuntimeRecord | None = None
    """Only in worlds of the agent runtime; absent (not ``null``) elsewhere, so old worlds are unchanged."""
    defects: list[DefectRecord] = Field(default_factory=list, max_length=MAX_DEFECTS)
    """Late field: repairs of the input boundary; emitted only when non-empty (absent = ``[]``)."""
    bytes: int = Field(0, ge=0)
    """UTF-8 size of the compact JSON of the record without ``bytes``."""
