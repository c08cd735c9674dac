"""Replay: re-run a recorded turn under a harness with the policy model (docs/formats.md §4.2).

Tools are answered from the record by a :class:`CallBook` and are never executed (docs/architecture.md
invariant 5); a call that was not recorded gets :data:`NO_RECORD` as an error result and counts
as off-support (Dream-RSI: an unrecorded action reveals nothing). Memory comes from the record
through :class:`ReplayMemoryProvider`, which has no write path (invariant 7). The turn itself runs
through :func:`rsi_common.kernel.run_turn` — the same code path as live turns — so with the same
model responses a replay sends byte-identical requests (invariant 6).

Decisions where docs/formats.md §4.2 is silent:

* ``ReplayResult`` JSON carries ``"schema": "rsi-replay/1"``; ``from_json`` accepts records
  without it (the first format) and refuses other schema ids.
* The replay's trajectory lineage is ``h0`` for H0 and ``agent`` otherwise (it is not stored).
* The default ``llm_factory`` is ``make_client(policy.provider, policy.model, settings)`` with
  ``settings`` passed in (or ``Settings()`` built at call time); ``PolicySpec.credentials`` is for
  custom factories (the default client reads keys from settings).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rsi_common.errors import InvalidInput
from rsi_common.harness import H0_VERSION
from rsi_common.kernel import RetryPolicy, ToolDef, ToolOutput, ToolResult, TurnPlan, run_turn
from rsi_common.kernel.types import DEFAULT_MAX_TOKENS, TurnYield
from rsi_common.stored import repair
from rsi_common.world import TurnWorld

if TYPE_CHECKING:
    from rsi_common.config import Settings
    from rsi_common.harness import Harness
    from rsi_common.llm import ModelClient

__all__ = [
    "ANSWER_CHARS",
    "NO_RECORD",
    "REPLAY_SCHEMA",
    "TRANSCRIPT_CHARS",
    "CallBook",
    "PolicySpec",
    "ReplayMemoryProvider",
    "ReplayResult",
    "ReplayTool",
    "canon",
    "cut_transcript",
    "kept_answer",
    "loose",
    "replay_plan",
    "replay_tools",
    "replay_world",
]

NO_RECORD = (
    "[replay] No recorded result: this call was not made in the recorded turn, so its outcome is unknown."
)
REPLAY_SCHEMA = "rsi-replay/1"
TRANSCRIPT_CHARS = 4000
ANSWER_CHARS = 50_000
"""A trial's stored answer, at most (:func:`kept_answer`; the judge reads 12,000 characters of it)."""
_DEFAULT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


# --- CallBook ----------------------------------------------------------------------------------


def canon(x: Any) -> str:
    """Canonical JSON of ``x`` (fallback ``str(x)``)."""
    try:
        return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(x)


def loose(x: Any) -> Any:
    """Strings → whitespace-collapsed lowercase; dict keys ``str()``-ed (case kept); lists element-wise."""
    if isinstance(x, str):
        return " ".join(x.split()).lower()
    if isinstance(x, Mapping):
        return {str(k): loose(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [loose(v) for v in x]
    return x


Hit = tuple[Any, bool]


class CallBook:
    """Recorded tool results, looked up by exact input, loose input, or (guide tools) by name.

    Thread-safe. The n-th use (0-based) of an index key returns ``hits[min(n, len(hits) − 1)]`` in
    recorded order; every answer is a deep copy. Unanswerable calls are appended to
    ``off_support`` (``{name, input}``) and get ``(NO_RECORD, True)``.

    ``pending`` are the calls that suspended the recorded slice (a runtime wait with no result yet,
    docs/runtime/subagents.md#worlds-and-replay): :meth:`yields` says when the replay must suspend
    at the same call instead of answering it.
    """

    def __init__(self, calls: Iterable[Mapping[str, Any]], guide_names: Iterable[str] = (),
                 pending: Iterable[Mapping[str, Any]] = ()) -> None:
        self._exact: dict[tuple[str, str], list[Hit]] = {}
        self._loose: dict[tuple[str, str], list[Hit]] = {}
        self._by_name: dict[str, list[Hit]] = {}
        self._uses: dict[tuple[str, tuple[str, str]], int] = {}
        self._guides = set(guide_names)
        self._lock = threading.Lock()
        self.off_support: list[dict[str, Any]] = []
        self.answered = 0
        self._pending: dict[tuple[str, str], int] = {}
        for call in pending:
            key = (str(call.get("name", "")), canon(call.get("input")))
            self._pending[key] = self._pending.get(key, 0) + 1
        for call in calls:
            name = str(call.get("name", ""))
            tool_input = call.get("input")
            hit: Hit = (call.get("content", ""), bool(call.get("is_error", False)))
            self._exact.setdefault((name, canon(tool_input)), []).append(hit)
            self._loose.setdefault((name, canon(loose(tool_input))), []).append(hit)
            self._by_name.setdefault(name, []).append(hit)

    @classmethod
    def from_world(cls, data: Mapping[str, Any]) -> CallBook:
        """The book of a world record (``tools.calls``; guide tools from ``tools.defs``)."""
        tools = data.get("tools") or {}
        defs = tools.get("defs") or []
        guides = [str(d.get("name")) for d in defs if isinstance(d, Mapping) and d.get("guide")]
        calls = [c for c in tools.get("calls") or [] if isinstance(c, Mapping)]
        return cls(calls, guides, _pending_calls(data, calls))

    def yields(self, name: str, tool_input: Any) -> bool:
        """True (once per recorded pending call) when this exact call suspended the recorded slice
        and no recorded result of the same call is left to answer it."""
        with self._lock:
            key = (name, canon(tool_input))
            if not self._pending.get(key) or self._uses.get(("e", key), 0) < len(self._exact.get(key, [])):
                return False
            self._pending[key] -= 1
            return True

    def _next(self, tag: str, key: tuple[str, str], hits: list[Hit]) -> Hit:
        n = self._uses.get((tag, key), 0)
        self._uses[(tag, key)] = n + 1
        return hits[min(n, len(hits) - 1)]

    def lookup(self, name: str, tool_input: Any) -> tuple[Any, bool]:
        """``(content, is_error)`` for one call (docs/formats.md §4.2 item 2)."""
        with self._lock:
            key = (name, canon(tool_input))
            hit: Hit | None = None
            if key in self._exact:
                hit = self._next("e", key, self._exact[key])
            else:
                lkey = (name, canon(loose(tool_input)))
                if lkey in self._loose:
                    hit = self._next("l", lkey, self._loose[lkey])
                elif name in self._guides and self._by_name.get(name):
                    hit = self._by_name[name][-1]
            if hit is None:
                self.off_support.append({"name": name, "input": copy.deepcopy(tool_input)})
                return NO_RECORD, True
            self.answered += 1
            return copy.deepcopy(hit[0]), hit[1]


def _pending_calls(data: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``tool_use`` blocks of a slice that ended ``suspended``/``AWAITING_CHILDREN``: those of
    the last assistant message of ``outcome.transcript`` without a recorded result."""
    outcome = data.get("outcome") or {}
    if outcome.get("status") != "suspended" or outcome.get("termination_reason") != "AWAITING_CHILDREN":
        return []
    transcript = outcome.get("transcript") or []
    last = transcript[-1] if transcript and isinstance(transcript[-1], Mapping) else {}
    content = last.get("content") if last.get("role") == "assistant" else None
    answered = {str(c.get("tool_use_id", "")) for c in calls}
    return [{"name": b.get("name"), "input": b.get("input")} for b in content or [] if isinstance(b, Mapping)
            and b.get("type") == "tool_use" and str(b.get("id", "")) not in answered]


class ReplayTool:
    """The executor of a recorded (non-live) tool: asks the :class:`CallBook`, never runs anything;
    a call that suspended the recorded slice suspends the replay the same way (:class:`TurnYield`)."""

    def __init__(self, name: str, book: CallBook) -> None:
        self.name = name
        self.book = book

    def __call__(self, tool_input: dict[str, Any]) -> ToolOutput:
        if self.book.yields(self.name, tool_input):
            raise TurnYield({"replay": True, "name": self.name})
        content, is_error = self.book.lookup(self.name, tool_input)
        return ToolResult(content if isinstance(content, str | list) else str(content), is_error)


def replay_tools(data: Mapping[str, Any], book: CallBook) -> list[ToolDef]:
    """The replay registry's tools, in recorded order (docs/formats.md §4.2 item 3).

    Empty names and contributed names are skipped; ``live`` definitions stay live (the kernel
    serves them with its built-in); every other tool is a :class:`ReplayTool`.
    """
    tools = data.get("tools") or {}
    contributed = set(tools.get("contributed") or [])
    out: list[ToolDef] = []
    for d in tools.get("defs") or []:
        name = str(d.get("name") or "") if isinstance(d, Mapping) else ""
        if not name or name in contributed:
            continue
        schema = d.get("input_schema")
        out.append(ToolDef(
            name=name,
            description=str(d.get("description") or ""),
            input_schema=schema if isinstance(schema, Mapping) else dict(_DEFAULT_SCHEMA),
            core=bool(d.get("core", True)),
            activated=bool(d.get("activated", False)),
            guide=bool(d.get("guide", False)),
            family=d.get("family") if isinstance(d.get("family"), str) else None,
            read_only=bool(d.get("read_only", False)),
            live=bool(d.get("live", False)),
            executor=None if d.get("live") else ReplayTool(name, book),
        ))
    return out


class ReplayMemoryProvider:
    """Memory of a replay: retrieval returns the recorded chunks; there is no write path."""

    rsi_replay = True

    def __init__(self, chunks: Sequence[Mapping[str, Any]] | None) -> None:
        self._chunks = None if chunks is None else [dict(c) for c in chunks]

    def retrieve(self, query: str, timeout_s: float) -> list[dict[str, Any]]:
        """The recorded first-iteration retrieval (a deep copy; ``[]`` when none was recorded)."""
        return copy.deepcopy(self._chunks) if self._chunks is not None else []


# --- plan rebuild ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicySpec:
    """The agent's current policy model: provider, model, optional temperature and credentials."""

    provider: str
    model: str
    temperature: float | None = None
    credentials: Mapping[str, str] | None = field(default=None, repr=False, compare=False)


def replay_plan(world: TurnWorld, policy: PolicySpec, book: CallBook) -> TurnPlan:
    """The replay's :class:`TurnPlan` (docs/formats.md §4.2 item 5)."""
    data = world.data
    rec = data.get("plan") or {}
    state = data.get("state") or {}
    memory = data.get("memory") or {}
    kwargs: dict[str, Any] = dict(rec.get("kwargs") or {})
    kwargs["stream"] = False
    if policy.temperature is not None and "temperature" not in kwargs:
        kwargs["temperature"] = policy.temperature
    kwargs["max_tokens"] = rec.get("max_tokens") or kwargs.get("max_tokens") or DEFAULT_MAX_TOKENS
    for key in ("context_window_budget", "enable_compaction"):
        if rec.get(key) is not None:
            kwargs[key] = rec[key]
    return TurnPlan(
        input=copy.deepcopy(data.get("input", "")),
        agent_id=str(data.get("agent_id") or ""),
        io_id=str(data.get("io_id") or ""),
        interaction_id=str(data.get("interaction_id") or ""),
        session_id=str(state.get("session_id") or ""),
        provider=policy.provider,
        model=policy.model,
        credentials=policy.credentials,
        name=str(rec.get("name") or ""),
        system_parts=[(str(p[0]), str(p[1])) for p in rec.get("system_parts") or [] if len(p) == 2],
        messages=copy.deepcopy(list(state.get("messages") or [])),
        tools=replay_tools(data, book),
        memory=ReplayMemoryProvider(memory.get("chunks")) if memory.get("present") else None,
        output_schema=rec.get("output_schema"),
        turn_notes=[str(n) for n in rec.get("turn_notes") or []],
        metadata=copy.deepcopy(dict(state.get("metadata") or {})),
        kwargs=kwargs,
        clock=world.clock,
    )


# --- result ------------------------------------------------------------------------------------


def kept_answer(answer: str) -> str:
    """The policy's answer as a trial stores and grades it: lone surrogates replaced by U+FFFD (a
    hostile model may send one; PostgreSQL refuses it), the first :data:`ANSWER_CHARS` characters
    + ``"…"`` when longer."""
    text = str(repair(answer)[0])
    return text if len(text) <= ANSWER_CHARS else text[:ANSWER_CHARS] + "…"


def cut_transcript(x: Any, limit: int = TRANSCRIPT_CHARS) -> Any:
    """Strings longer than ``limit`` → first ``limit`` chars + ``"…"``; image blocks → ``[image]`` text;
    lone surrogates → U+FFFD and NaN/±inf → ``null`` (what a stored row can hold, rsi_common.stored)."""
    if isinstance(x, str):
        x = str(repair(x)[0])
        return x if len(x) <= limit else x[:limit] + "…"
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        if x.get("type") in ("image", "input_image"):
            return {"type": "text", "text": "[image]"}
        return {str(k): cut_transcript(v, limit) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [cut_transcript(v, limit) for v in x]
    return x


_RESULT_FIELDS = (
    "world_id", "source", "answer", "status", "termination_reason", "policy_tokens", "steps", "params_read",
    "off_support", "off_support_calls", "answered", "transcript", "error", "seconds",
)


@dataclass
class ReplayResult:
    """One replay trial (docs/formats.md §4.2 item 7). ``missing`` ⇔ ``error`` is non-empty.

    Attributes:
        world_id: the replayed world.
        source: ``replay`` (fresh), ``recorded`` or ``cached`` (docs/algorithm/consolidation.md §3.6.1).
        status: turn status (``cancelled`` is not an error); ``""`` when the replay never ran.
        policy_tokens: c(τ) of the replay (docs/formats.md §7.4); None when unknown.
        params_read: sorted ``<id>.params.<key>`` addresses read by the harness.
        off_support / off_support_calls: unrecorded calls (count and ``{name, input}`` list).
        answered: calls answered from the record.
        transcript: the messages after the recorded history (strings ≤ 4,000 chars + ``…``).
        error: ``"<termination_reason>: <message>"`` for a failed turn, ``"<Type>: <msg>"[:500]`` for
            an exception, else ``""``.
        seconds: wall time of the replay.
    """

    world_id: str
    source: str = "replay"
    answer: str = ""
    status: str = ""
    termination_reason: str = ""
    policy_tokens: int | None = None
    steps: int = 0
    params_read: list[str] = field(default_factory=list)
    off_support: int = 0
    off_support_calls: list[dict[str, Any]] = field(default_factory=list)
    answered: int = 0
    transcript: list[Any] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0

    @property
    def missing(self) -> bool:
        """The trial is missing (it has an error)."""
        return bool(self.error)

    def to_json(self, transcript: bool = True, *, shared: bool = False) -> dict[str, Any]:
        """JSON object with ``schema``; ``transcript=False`` omits the transcript (caches,
        docs/algorithm/consolidation.md §3.6.5). ``shared``: the object holds this result's own
        lists instead of copies (a caller that owns the result and changes neither; a trial's store,
        docs/performance/consolidation.md#a-trials-cost)."""
        out: dict[str, Any] = {"schema": REPLAY_SCHEMA}
        for name in _RESULT_FIELDS:
            if name == "transcript" and not transcript:
                continue
            value = getattr(self, name)
            out[name] = value if shared else copy.deepcopy(value)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ReplayResult:
        """Inverse of :meth:`to_json` (a missing transcript loads as ``[]``).

        Raises:
            InvalidInput: unknown ``schema`` or no ``world_id``.
        """
        schema = obj.get("schema", REPLAY_SCHEMA)
        if schema != REPLAY_SCHEMA:
            raise InvalidInput(f"unknown replay result schema {schema!r}")
        if "world_id" not in obj:
            raise InvalidInput("replay result without world_id")
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: copy.deepcopy(v) for k, v in obj.items() if k in known})

    @classmethod
    def from_recorded(cls, world: TurnWorld, source: str = "recorded") -> ReplayResult:
        """The recorded turn as an on-policy trial (docs/algorithm/consolidation.md §3.6.1): params_read
        ``[]``, off_support 0."""
        outcome = world.data.get("outcome") or {}
        return cls(
            world_id=world.id, source=source, answer=world.answer,
            status=str(outcome.get("status") or "completed"),
            termination_reason=str(outcome.get("termination_reason") or ""),
            policy_tokens=outcome.get("policy_tokens"), steps=int(outcome.get("steps") or 0),
            transcript=cut_transcript(list(outcome.get("transcript") or [])),
        )


# --- replay_world ------------------------------------------------------------------------------


def _default_factory(settings: Settings | None) -> Callable[[PolicySpec], ModelClient]:
    def build(policy: PolicySpec) -> ModelClient:
        from rsi_common.config import Settings
        from rsi_common.llm import make_client

        return make_client(policy.provider, policy.model, settings or Settings(), role="policy")

    return build


def replay_world(
    world: TurnWorld,
    harness: Harness,
    policy: PolicySpec,
    *,
    seed: int | None = None,
    cancelled: Callable[[], bool] | None = None,
    llm_factory: Callable[[PolicySpec], ModelClient] | None = None,
    settings: Settings | None = None,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ReplayResult:
    """Re-run ``world`` under ``harness`` with the policy model; tools come from the record.

    Never raises for a bad world, harness or model: every failure is a result with ``error`` set
    (a missing trial). A cancel (checked before the first model call and between model calls)
    returns status ``cancelled``, termination ``CANCELLED``, no error.

    Args:
        world: the recorded turn.
        harness: the harness to evaluate (the incumbent or a candidate).
        policy: the agent's current policy model.
        seed: the trial index, sent as every request's ``seed``.
        cancelled: cooperative cancel flag.
        llm_factory: builds the client from ``policy`` (default: ``make_client`` with ``settings``).
        settings: for the default factory.
        retry / sleep: model retries (tests pass ``RetryPolicy(backoff_s=0)``).
    """
    t0 = time.perf_counter()
    if not world.replayable:
        return ReplayResult(world_id=world.id, error="world is not replayable",
                            seconds=time.perf_counter() - t0)
    book: CallBook | None = None
    try:
        book = CallBook.from_world(world.data)
        plan = replay_plan(world, policy, book)
        client = (llm_factory or _default_factory(settings))(policy)
        lineage = "h0" if harness.version == H0_VERSION else "agent"
        if retry is None and settings is not None:
            retry = RetryPolicy.from_settings(settings)
        turn = run_turn(plan, harness, client, record_world=False, seed=seed, cancelled=cancelled,
                        retry=retry, sleep=sleep, lineage=lineage)
    except Exception as exc:  # recorded against the candidate as a missing trial
        return ReplayResult(
            world_id=world.id, error=f"{type(exc).__name__}: {exc}"[:500],
            off_support=len(book.off_support) if book else 0,
            off_support_calls=list(book.off_support) if book else [],
            answered=book.answered if book else 0, seconds=time.perf_counter() - t0,
        )
    return ReplayResult(
        world_id=world.id, source="replay", answer=kept_answer(turn.answer), status=turn.status,
        termination_reason=turn.termination_reason, policy_tokens=turn.policy_tokens, steps=turn.steps,
        params_read=sorted(turn.params_read), off_support=len(book.off_support),
        off_support_calls=repair(book.off_support)[0], answered=book.answered,
        transcript=cut_transcript(turn.transcript), error=turn.error if turn.status == "failed" else "",
        seconds=time.perf_counter() - t0,
    )
