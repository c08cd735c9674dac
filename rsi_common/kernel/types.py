"""Value types of the turn engine K0 (docs/formats.md §7.1, §7.3): plans, tool definitions, results.

Message and block shapes follow the model interface of :mod:`rsi_common.llm` (Anthropic-style
blocks ``text``, ``tool_use``, ``tool_result``, ``thinking``, ``image``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rsi_common.errors import InvalidInput

if TYPE_CHECKING:
    from rsi_common.config import Settings

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "MODEL_DEFAULTS",
    "Action",
    "Decision",
    "MemoryProvider",
    "ModelConfig",
    "ParsedStep",
    "RetryPolicy",
    "Signal",
    "ToolDef",
    "ToolExecutor",
    "ToolOutput",
    "ToolResult",
    "TurnPlan",
    "TurnResult",
    "TurnStatus",
    "TurnYield",
]

TurnStatus = Literal["completed", "suspended", "blocked", "failed", "cancelled"]
"""Turn status (docs/algorithm/formulas.md §1.2, docs/formats.md §7.3); ``cancelled``: a cancelled replay, or
a host that stopped its turn."""

Action = Literal["continue", "complete", "suspend", "error", "escalate"]
"""The control decision (docs/formats.md §5.6 *Control*)."""

Signal = Literal["complete", "blocked", "error"]
"""A completion signal found by the output detector."""

DEFAULT_MAX_TOKENS = 8192

MODEL_DEFAULTS: Mapping[str, Any] = {
    "max_tokens": DEFAULT_MAX_TOKENS,
    "temperature": 0.7,
    "thinking_level": None,
    "enable_compaction": True,
    "context_window_budget": 200_000,
    "max_iterations": 20,
    "max_turn_tokens": None,
}
"""Kernel model config defaults (docs/formats.md §7.1); each is overridable by a host kwarg only."""


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned: ``content`` (a string or a list of content blocks) and ``is_error``."""

    content: str | list[dict[str, Any]]
    is_error: bool = False


ToolOutput = str | list[dict[str, Any]] | ToolResult
"""An executor may return plain text, a list of blocks, or a :class:`ToolResult`."""

ToolExecutor = Callable[[dict[str, Any]], ToolOutput]
"""A host executor: called with a private copy of the tool input; exceptions become error results.

Permissions, confirmations and sandboxing are the executor's business (docs/formats.md §7.2 stage tools).
Executors may be called from worker threads (executor ``parallel`` / ``partition``).
"""


@dataclass(frozen=True)
class ToolDef:
    """One tool of a turn (docs/formats.md §7.1).

    Attributes:
        name: unique tool name.
        description: shown to the model; the first line is used in the deferred-tool listing.
        input_schema: JSON schema of the input object.
        core: always exposed (False = deferred until activated, e.g. by ``ToolSearch``).
        activated: a deferred tool that is exposed from the start.
        guide: the output guides the model to a tool family and does not depend on its arguments.
        family: tool family name used by reachability gating.
        read_only: the tool has no side effects (may run in parallel under ``partition``).
        live: set only on kernel built-ins; a host value ``True`` on any other name is ignored.
        executor: the host executor; ``None`` makes every call an error result.
    """

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    core: bool = True
    activated: bool = False
    guide: bool = False
    family: str | None = None
    read_only: bool = False
    live: bool = False
    executor: ToolExecutor | None = field(default=None, compare=False, repr=False)

    def model_view(self) -> dict[str, Any]:
        """The definition sent to the model: ``{name, description, input_schema}``."""
        return {"name": self.name, "description": self.description, "input_schema": dict(self.input_schema)}


class MemoryProvider(Protocol):
    """A host memory store (docs/formats.md §4.1 ``memory``, §5.6 *Memory*).

    ``retrieve`` returns chunks ``{key, source, content, relevance_score, metadata, pinned}``.
    Writers also implement ``archive(messages: list[dict]) -> None``; a replay provider has the
    class attribute ``rsi_replay = True`` and no write path.
    """

    def retrieve(self, query: str, timeout_s: float) -> list[dict[str, Any]]: ...


def _now() -> float:
    return time.time()


@dataclass
class TurnPlan:
    """Everything the host gives K0 for one turn (docs/formats.md §7.1).

    ``credentials`` is never captured in a world, trajectory or log (docs/architecture.md invariant 7);
    it is excluded from ``repr``. ``kwargs`` holds host overrides (``SAFE_KWARGS`` are recorded in
    the world; ``max_turn_tokens`` is honoured but not recorded). ``clock`` is the turn clock in
    epoch seconds (default: now); time-dependent prompt blocks use it.
    """

    input: str | list[dict[str, Any]]
    agent_id: str = ""
    io_id: str = ""
    interaction_id: str = ""
    session_id: str = ""
    provider: str = ""
    model: str = ""
    credentials: Mapping[str, str] | None = field(default=None, repr=False)
    name: str = ""
    system_parts: Sequence[tuple[str, str] | list[str]] = ()
    messages: Sequence[Mapping[str, Any]] = ()
    tools: Sequence[ToolDef] = ()
    memory: MemoryProvider | None = None
    output_schema: Mapping[str, Any] | None = None
    turn_notes: Sequence[str] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    clock: float = field(default_factory=_now)


def _int_or_none(name: str, value: Any, *, minimum: int = 0) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise InvalidInput(f"kwarg {name} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise InvalidInput(f"kwarg {name} must be ≥ {minimum}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class ModelConfig:
    """The turn's resolved model config and kernel limits (docs/formats.md §7.1, §7.3).

    Values come from host kwargs over :data:`~rsi_common.kernel.types.MODEL_DEFAULTS`; no
    component can change them.
    """

    max_tokens: int
    temperature: float | None
    thinking_level: str | None
    enable_compaction: bool
    context_window_budget: int
    max_iterations: int
    max_turn_tokens: int | None
    output_schema: dict[str, Any] | None

    @classmethod
    def from_plan(cls, plan: TurnPlan) -> ModelConfig:
        """Resolve host kwargs over the defaults.

        Raises:
            InvalidInput: a kwarg has the wrong type or range.
        """
        kw = {**MODEL_DEFAULTS, **{k: v for k, v in plan.kwargs.items() if v is not None}}
        temperature = kw.get("temperature")
        if temperature is not None and (isinstance(temperature, bool)
                                        or not isinstance(temperature, int | float)):
            raise InvalidInput(f"kwarg temperature must be a number, got {temperature!r}")
        schema = plan.output_schema if plan.output_schema is not None else kw.get("output_schema")
        if schema is not None and not isinstance(schema, Mapping):
            raise InvalidInput("output_schema must be a JSON object")
        level = kw.get("thinking_level")
        return cls(
            max_tokens=_int_or_none("max_tokens", kw["max_tokens"], minimum=1) or 1,
            temperature=None if temperature is None else float(temperature),
            thinking_level=None if level is None else str(level),
            enable_compaction=bool(kw["enable_compaction"]),
            context_window_budget=_int_or_none("context_window_budget", kw["context_window_budget"]) or 0,
            max_iterations=_int_or_none("max_iterations", kw["max_iterations"], minimum=1) or 1,
            max_turn_tokens=_int_or_none("max_turn_tokens", kw.get("max_turn_tokens")),
            output_schema=None if schema is None else dict(schema),
        )


@dataclass(frozen=True)
class RetryPolicy:
    """Model-call retries on :class:`~rsi_common.errors.ModelTransientError` (docs/formats.md §7.3).

    ``retries`` extra attempts with delays ``backoff_s · 2^i`` seconds (1 s, 2 s, 4 s by default).
    Tests pass ``RetryPolicy(backoff_s=0.0)``.
    """

    retries: int = 3
    backoff_s: float = 1.0

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        """``model_max_retries`` retries starting at ``model_backoff_s`` (tests set it to 0)."""
        return cls(retries=settings.model_max_retries, backoff_s=settings.model_backoff_s)

    def delays_s(self) -> tuple[float, ...]:
        """The sleep before each retry, in seconds."""
        return tuple(self.backoff_s * (2**i) for i in range(max(0, self.retries)))


@dataclass(frozen=True)
class ParsedStep:
    """The output component's reading of one model response (docs/formats.md §5.6 *Output*)."""

    final_text: str
    tool_calls: list[dict[str, Any]]
    signal: Signal | None = None
    signal_message: str = ""


@dataclass(frozen=True)
class Decision:
    """A control decision plus the termination reason it implies (``""`` → the default)."""

    action: Action
    reason: str = ""
    message: str = ""


@dataclass
class TurnResult:
    """The outcome of :func:`rsi_common.kernel.run_turn`.

    Attributes:
        answer: the settled final text.
        status / termination_reason: docs/formats.md §7.3 mapping.
        world: the finalized world record (``rsi-world/1``), or None when capture was off or refused.
        trajectory: the content-free trajectory record (docs/formats.md §7.5).
        params_read: sorted ``<id>.params.<key>`` addresses read by the harness's components.
        policy_tokens: c(τ) = Σ input + output tokens over every model call of the turn
        (docs/formats.md §7.4).
        steps: main model calls that returned a response.
        transcript: the messages of this turn (from the input message on), unclipped.
        error: ``"<termination_reason>: <message>"`` when the turn failed, else ``""``.
        usage: billing usage of ``main`` calls only ``{calls, input_tokens, output_tokens, ...}``.
        ledger: every model call of the turn (``CallRecord.to_json()`` dicts).
        events: kernel events (``{"type": ..., ...}``), content-free.
        recorded: the turn was stored by :meth:`rsi_common.client.RsiClient.run_turn` (world and
            trajectory as the settings ask); always False from the kernel alone, which stores nothing.
        record_error: why the turn's world was not captured or the turn not recorded
            (``"<ErrorClass>: <short message>"``, never quoting turn content), else ``""``. The
            answer is returned either way (``docs/operations/failure-recovery.md``, *Capture errors*).
    """

    answer: str
    status: TurnStatus
    termination_reason: str
    world: dict[str, Any] | None
    trajectory: dict[str, Any]
    params_read: list[str]
    policy_tokens: int
    steps: int
    transcript: list[dict[str, Any]]
    error: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    recorded: bool = False
    record_error: str = ""
    pending: dict[str, Any] | None = None
    """A turn suspended with ``AWAITING_CHILDREN``: ``{"calls": [tool_use_id, …] in call order,
    "results": {tool_use_id: tool_result block} of the calls that ran, "waits": {tool_use_id: wait}}``
    (docs/runtime/subagents.md#wait-yield-and-resume); else ``None``."""


class TurnYield(Exception):
    """Raised by a host tool's executor to suspend the turn until its wait is met
    (docs/runtime/subagents.md#wait-yield-and-resume). The kernel finishes the batch, drops its
    ``tool_result`` message and ends the turn ``suspended``/``AWAITING_CHILDREN`` with
    :attr:`TurnResult.pending`."""

    def __init__(self, wait: Mapping[str, Any]) -> None:
        super().__init__("AWAITING_CHILDREN")
        self.wait = dict(wait)
