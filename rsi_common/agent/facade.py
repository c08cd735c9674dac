"""The ``Agent`` façade: a self-improving agent in three lines (docs/host/agent.md).

    from rsi_common import Agent
    agent = Agent("helper")                       # sim model, embedded default: runs offline
    print(agent.run("Compare two laptops").answer)

Every turn goes the host API's way (``RsiClient.run_turn`` or ``RsiHttpClient.run_turn``): the
agent's current harness is resolved once per turn, the kernel K0 runs it, the world is captured and
checked at the input boundary (credentials refused), and the turn is recorded and handed to
consolidation. What the façade adds: the model client from a provider name (built-in or preset),
tools from typed functions, the conversation history in SQL, streaming, and explicit feedback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar, overload

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from rsi_common import db
from rsi_common.agent.host import Host, HostClient, open_host
from rsi_common.agent.results import AgentEvent, AgentResult, FinalResult, tool_calls_of
from rsi_common.agent.streams import astream_turn, stream_turn
from rsi_common.agent.tools import tool_def
from rsi_common.agent.workspace import workspace_tools
from rsi_common.boundary import check_id
from rsi_common.client import RecordedTurn
from rsi_common.config import Settings
from rsi_common.credentials import redact
from rsi_common.errors import InvalidInput
from rsi_common.kernel import EventSink, ToolDef, TurnPlan
from rsi_common.llm import ModelClient, make_client
from rsi_common.stored import safe_reason

__all__ = ["DEFAULT_CONVERSATION", "HISTORY_RETENTION", "HISTORY_TURNS", "Agent"]

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_CONVERSATION = "default"
HISTORY_TURNS = 20
"""Turns of the conversation sent with each new turn (the window), by default."""
HISTORY_RETENTION = 200
"""Turns kept per conversation in SQL, by default (older ones are deleted as new ones arrive)."""


def redacted(value: Any) -> Any:
    """A copy of ``value`` with credential-shaped text in every string redacted (what the history stores)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redacted(v) for v in value]
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items()}
    return value


class Agent:
    """A self-improving agent (module docstring). Thread-safe; one per agent id and process.

    Args:
        agent_id: the agent (created on its first recorded turn).
        provider: ``sim``, ``anthropic``, ``openai`` or a preset (``ollama``, ``groq``, …; see
            :mod:`rsi_common.llm.presets`); default ``RSI_DEFAULT_PROVIDER`` (``sim``).
        model: the model name; default ``RSI_DEFAULT_MODEL`` (``sim-1``).
        system: the host's system prompt part (the harness builds the rest).
        settings: default ``Settings()`` (the ``RSI_*`` environment, read once here).
        base_url: endpoint override of the provider.
        history_turns: turns of history sent with each turn (0: none).
        history_retention: turns kept per conversation.
        client: a host client to record through (module :mod:`rsi_common.agent.host`).
        service_url, token: record over HTTP through ``RsiHttpClient`` (the one flag).
        engine: the database of the conversation history (default: see the host module).
        model_client: a model client to use instead of building one from the provider.

    Raises:
        InputLimitError: the agent id breaks the id grammar.
        InvalidInput: an unknown provider (the message lists the known ones), a bad window.
        ModelAuthError: a real provider without a key.
    """

    def __init__(self, agent_id: str, *, provider: str | None = None, model: str | None = None,
                 system: str | None = None, settings: Settings | None = None, base_url: str | None = None,
                 history_turns: int = HISTORY_TURNS, history_retention: int = HISTORY_RETENTION,
                 client: HostClient | None = None, service_url: str | None = None, token: str | None = None,
                 engine: Engine | None = None, model_client: ModelClient | None = None) -> None:
        self.agent_id = check_id(agent_id, "agent_id")
        if isinstance(history_turns, bool) or not isinstance(history_turns, int) or history_turns < 0:
            raise InvalidInput("history_turns: must be an integer ≥ 0")
        if isinstance(history_retention, bool) or not isinstance(history_retention, int) \
                or history_retention < max(1, history_turns):
            raise InvalidInput("history_retention: must be an integer ≥ history_turns and ≥ 1")
        self.settings = settings if settings is not None else Settings()
        self.provider = provider or self.settings.default_provider
        self.model = model or self.settings.default_model
        self.model_client = model_client or make_client(self.provider, self.model, self.settings,
                                                        base_url=base_url)
        self.system = system
        self.history_turns, self.history_retention = history_turns, history_retention
        self._host_args: dict[str, Any] = {"client": client, "engine": engine, "service_url": service_url,
                                           "token": token}
        self._host: Host | None = None
        self._lock = threading.Lock()
        self._tools: dict[str, ToolDef] = {}
        self.last_io_id: str | None = None
        """The io id of this agent's newest recorded turn (``feedback`` and ``correct`` use it)."""

    @classmethod
    def workspace(cls, directory: str | os.PathLike[str], agent_id: str = "workspace",
                  **kwargs: Any) -> Agent:
        """An agent with the sandboxed file tools of ``directory`` (:mod:`rsi_common.agent.workspace`).

        Raises:
            InvalidInput: ``directory`` does not exist (and the constructor's errors).
        """
        agent = cls(agent_id, **kwargs)
        agent.add_workspace(directory)
        return agent

    def add_workspace(self, directory: str | os.PathLike[str]) -> Agent:
        """Add the file tools of ``directory``; returns the agent."""
        for tool in workspace_tools(directory):
            self.add_tool(tool)
        return self

    # --- tools ----------------------------------------------------------------------------------

    @overload
    def tool(self, fn: F, /) -> F: ...

    @overload
    def tool(self, fn: None = None, /, *, name: str | None = None, description: str | None = None,
             read_only: bool = False) -> Callable[[F], F]: ...

    def tool(self, fn: F | None = None, /, *, name: str | None = None, description: str | None = None,
             read_only: bool = False) -> F | Callable[[F], F]:
        """Register a typed function as a tool (:mod:`rsi_common.agent.tools`); ``@agent.tool`` or
        ``@agent.tool(name=…, description=…)``. The function is returned unchanged.

        Raises:
            InvalidInput: the function cannot be described, or a tool of that name exists.
        """
        def register(f: F) -> F:
            self.add_tool(tool_def(f, name=name, description=description, read_only=read_only))
            return f

        return register(fn) if fn is not None else register

    def add_tool(self, tool: ToolDef) -> None:
        """Register a kernel tool definition.

        Raises:
            InvalidInput: a tool of that name is registered already.
        """
        with self._lock:
            if tool.name in self._tools:
                raise InvalidInput(f"tool {tool.name}: a tool of that name is registered already")
            self._tools[tool.name] = tool

    @property
    def tools(self) -> list[ToolDef]:
        """The registered tools, in registration order."""
        return list(self._tools.values())

    # --- turns ----------------------------------------------------------------------------------

    def host(self) -> Host:
        """The opened host (opened on first use; :mod:`rsi_common.agent.host`)."""
        with self._lock:
            if self._host is None:
                self._host = open_host(self.settings, **self._host_args)
            return self._host

    def history(self, conversation: str = DEFAULT_CONVERSATION) -> list[dict[str, Any]]:
        """The messages the next turn of ``conversation`` is sent with (the window)."""
        with db.session_factory(self.host().engine).begin() as s:
            return db.conversation_window(s, self.agent_id, conversation, self.history_turns)

    def forget(self, conversation: str = DEFAULT_CONVERSATION) -> int:
        """Delete the stored history of ``conversation``; returns how many turns were deleted."""
        with db.session_factory(self.host().engine).begin() as s:
            return db.forget_conversation(s, self.agent_id, conversation)

    def _plan(self, text: str, conversation: str, metadata: dict[str, Any] | None) -> TurnPlan:
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("text: give the user's message")
        check_id(conversation, "conversation")
        return TurnPlan(
            input=text, agent_id=self.agent_id, io_id="io-" + uuid.uuid4().hex[:24],
            interaction_id=conversation, provider=self.provider, model=self.model,
            system_parts=[("host", self.system)] if self.system else (),
            messages=self.history(conversation), tools=self.tools, metadata=dict(metadata or {}),
        )

    def _turn(self, text: str, conversation: str, metadata: dict[str, Any] | None,
              on_event: EventSink | None, cancelled: Callable[[], bool] | None) -> AgentResult:
        plan = self._plan(text, conversation, metadata)
        host = self.host()
        result = host.client.run_turn(self.agent_id, plan, self.model_client, on_event=on_event,
                                      cancelled=cancelled)
        history_error = ""
        if result.status != "cancelled":
            try:
                with db.session_factory(host.engine).begin() as s:
                    db.append_turn(s, self.agent_id, conversation, plan.io_id, redacted(result.transcript),
                                   retention=self.history_retention)
            except (SQLAlchemyError, InvalidInput) as exc:  # the answer is returned either way
                history_error = f"not added to the history: {safe_reason(exc, 200)}"
                log.error("agent %s: turn not added to the history: %s", self.agent_id, type(exc).__name__)
        if result.recorded:
            self.last_io_id = plan.io_id
        return AgentResult(answer=result.answer, status=result.status, conversation=conversation,
                           io_id=plan.io_id, tool_calls=tool_calls_of(result.transcript),
                           usage=dict(result.usage), recorded=result.recorded,
                           record_error=result.record_error, turn=result, history_error=history_error)

    def run(self, text: str, *, conversation: str = DEFAULT_CONVERSATION,
            metadata: dict[str, Any] | None = None) -> AgentResult:
        """Run one turn and record it.

        Raises:
            InvalidInput: empty text; a conversation id or metadata the input boundary refuses.
        """
        return self._turn(text, conversation, metadata, None, None)

    async def arun(self, text: str, *, conversation: str = DEFAULT_CONVERSATION,
                   metadata: dict[str, Any] | None = None) -> AgentResult:
        """:meth:`run` on a worker thread. Cancelling the awaiting task sets the turn's cancel flag: the
        turn stops before its next model call and is then not recorded (a turn whose last call had
        already started finishes and is recorded); the cancellation is re-raised once it ended."""
        stop = threading.Event()
        task = asyncio.get_running_loop().run_in_executor(
            None, lambda: self._turn(text, conversation, metadata, None, stop.is_set))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            stop.set()
            with contextlib.suppress(Exception):
                await task
            raise

    def stream(self, text: str, *, conversation: str = DEFAULT_CONVERSATION,
               metadata: dict[str, Any] | None = None) -> Iterator[AgentEvent]:
        """Run one turn, yielding its events as they happen (:mod:`rsi_common.kernel.events`), then a
        :class:`FinalResult`. Leaving the loop early cancels the turn: it is not recorded."""
        return stream_turn(lambda sink, cancelled: FinalResult(
            self._turn(text, conversation, metadata, sink, cancelled)))

    def astream(self, text: str, *, conversation: str = DEFAULT_CONVERSATION,
                metadata: dict[str, Any] | None = None) -> AsyncIterator[AgentEvent]:
        """The async form of :meth:`stream`."""
        return astream_turn(lambda sink, cancelled: FinalResult(
            self._turn(text, conversation, metadata, sink, cancelled)))

    # --- feedback -------------------------------------------------------------------------------

    def _signals(self, signals: dict[str, Any], io_id: str | None) -> RecordedTurn:
        target = io_id or self.last_io_id
        if target is None:
            raise InvalidInput("io_id: this agent has no recorded turn yet; run one first or name the turn")
        return self.host().client.record_signals(self.agent_id, target, signals)

    def feedback(self, *, stars: int | None = None, comment: str | None = None,
                 io_id: str | None = None) -> RecordedTurn:
        """Rate a turn (default: the newest recorded one): ``stars`` 1..5 and/or a ``comment``.

        Raises:
            InvalidInput: nothing given, no recorded turn, or a value the signal rules refuse.
        """
        signals: dict[str, Any] = {}
        if stars is not None:
            signals["stars"] = stars
        if comment is not None:
            signals["comment"] = comment
        if not signals:
            raise InvalidInput("feedback: give stars, a comment, or both")
        return self._signals(signals, io_id)

    def correct(self, text: str, *, io_id: str | None = None) -> RecordedTurn:
        """Say what the answer of a turn (default: the newest recorded one) should have been
        (the signal ``expected``)."""
        return self._signals({"expected": text}, io_id)

    # --- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close what the agent opened (never a client it was given). Idempotent."""
        with self._lock:
            host, self._host = self._host, None
        if host is not None:
            host.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
