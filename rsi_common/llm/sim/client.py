"""The sim client: a deterministic, offline stand-in for a real LLM in every role (docs/formats.md).

One call, in order:

1. **Call seed** = SHA-256 of canonical JSON ``[settings.sim.seed, role, request.messages,
   request.seed]`` (:func:`call_seed`). Every random choice of the call is a draw from this seed
   under its own label (:meth:`~rsi_common.llm.sim.core.SimCall.draw`), so the same request
   repeats identically and trial ``j`` (request seed ``j``) differs from trial ``j′`` only through
   the draws — i.e. only where ``noise`` or ``error_rate`` > 0.
2. **Latency**: sleep ``latency_ms + jitter_ms · draw("jitter")`` milliseconds.
3. **Errors**: with probability ``error_rate`` (``draw("error")``) raise
   :class:`~rsi_common.errors.ModelTransientError`, after the sleep (the call took its time).
   The sim never retries: the same call would fail the same way.
4. **Behaviour** of the client's role, from the role-behaviour registry
   (:mod:`~rsi_common.llm.sim.registry`). A request whose system prompt starts with
   :data:`~rsi_common.llm.base.COMPACTION_MARKER` is answered by the ``compact`` behaviour whatever
   the role.
5. **Streaming** (:meth:`SimClient.stream`): the same answer as ``complete``, after the same sleep,
   cut deterministically: text into words (each with its trailing spaces), a tool call's arguments
   into pieces of :data:`ARG_PIECE_CHARS` characters, then the whole response.
6. **Usage**: input tokens = ``ceil((len(system) + len(canonical JSON of messages) + len(canonical
   JSON of tools, 0 when none)) / 4)``; output tokens = ``ceil(chars of the reply / 4)`` where a
   text block counts its text and a ``tool_use`` block the canonical JSON of ``{"input", "name"}``.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from rsi_common.config import SimConfig
from rsi_common.errors import InvalidInput, ModelTransientError
from rsi_common.llm.base import (
    COMPACTION_MARKER,
    ROLE_NAMES,
    ModelRequest,
    ModelResponse,
    Usage,
    canonical_json,
)
from rsi_common.llm.sim.core import SimCall, SimHandler, seed_of
from rsi_common.llm.sim.registry import SIM_ROLES, behaviour
from rsi_common.llm.streaming import ModelChunk, ResponseChunk, TextChunk, ToolCallChunk

__all__ = ["ARG_PIECE_CHARS", "SimClient", "call_seed", "input_tokens", "output_tokens", "sim_chunks"]

ARG_PIECE_CHARS = 8
"""Characters of a tool call's argument JSON per streamed piece."""
_WORD = re.compile(r"\s*\S+\s*|\s+")


def sim_chunks(response: ModelResponse) -> Iterator[ModelChunk]:
    """The deterministic chunks of a sim reply (module docstring, step 5), without the final one."""
    index = 0
    for block in response.content:
        if block.get("type") == "text":
            for word in _WORD.findall(str(block.get("text", ""))):
                yield TextChunk(word)
        elif block.get("type") == "tool_use":
            args = json.dumps(block.get("input") or {}, ensure_ascii=False)
            yield ToolCallChunk(index, str(block.get("id", "")), str(block.get("name", "")),
                                args[:ARG_PIECE_CHARS])
            for start in range(ARG_PIECE_CHARS, len(args), ARG_PIECE_CHARS):
                yield ToolCallChunk(index, arguments=args[start:start + ARG_PIECE_CHARS])
            index += 1


def call_seed(global_seed: int, role: str, request: ModelRequest) -> bytes:
    """The 32-byte call seed (module docstring, step 1)."""
    return seed_of(global_seed, role, request)


def input_tokens(request: ModelRequest) -> int:
    """Sim input tokens of ``request`` (module docstring, step 5)."""
    chars = len(request.system) + len(canonical_json(request.messages))
    if request.tools:
        chars += len(canonical_json(request.tools))
    return math.ceil(chars / 4)


def output_tokens(content: list[dict[str, Any]]) -> int:
    """Sim output tokens of a reply (module docstring, step 5)."""
    chars = 0
    for b in content:
        if b.get("type") == "text":
            chars += len(str(b.get("text", "")))
        elif b.get("type") == "tool_use":
            chars += len(canonical_json({"input": b.get("input", {}), "name": b.get("name", "")}))
    return math.ceil(chars / 4)


class SimClient:
    """A :class:`~rsi_common.llm.base.ModelClient` that simulates a model in one role.

    Args:
        model: Reported model name (any string).
        config: The sim's knobs; default :class:`SimConfig` defaults.
        role: The behaviour (module docstring, step 4).
        sleep: Sleep function, in seconds (tests inject a recorder).
        handlers: Role registry to use instead of
            :data:`~rsi_common.llm.sim.registry.SIM_ROLES`.

    Raises:
        InvalidInput: ``role`` is neither a known role name nor in the registry.
    """

    provider = "sim"

    def __init__(
        self,
        model: str = "sim-1",
        config: SimConfig | None = None,
        *,
        role: str = "policy",
        sleep: Callable[[float], None] = time.sleep,
        handlers: Mapping[str, SimHandler] | None = None,
    ) -> None:
        self._handlers = SIM_ROLES if handlers is None else handlers
        if role not in ROLE_NAMES and role not in self._handlers:
            raise InvalidInput(f"unknown sim role {role!r}; expected one of {', '.join(ROLE_NAMES)}")
        self.model = model
        self.role = role
        self.config = config if config is not None else SimConfig()
        self._sleep = sleep

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` as the client's role (module docstring).

        Raises:
            ModelTransientError: Injected by ``error_rate``.
            ModelBadRequest: No behaviour is registered for the role.
        """
        call = SimCall(request, self.role, self.config, call_seed(self.config.seed, self.role, request))
        delay_ms = self.config.latency_ms + self.config.jitter_ms * call.draw("jitter")
        if delay_ms > 0:
            self._sleep(delay_ms / 1000.0)
        if self.config.error_rate > 0 and call.draw("error") < self.config.error_rate:
            raise ModelTransientError(
                f"sim: injected provider error (HTTP 529 overloaded; error_rate={self.config.error_rate})"
            )
        role = "compact" if request.system.lstrip().startswith(COMPACTION_MARKER) else self.role
        content = behaviour(role, self._handlers)(call)
        stop = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
        usage = Usage(input_tokens=input_tokens(request), output_tokens=output_tokens(content))
        return ModelResponse(
            content=content, usage=usage, stop_reason=stop, model=request.model or self.model
        )

    def stream(self, request: ModelRequest) -> Iterator[ModelChunk]:
        """Answer ``request`` in deterministic chunks (module docstring, step 5); same errors as
        :meth:`complete`, raised before the first chunk."""
        response = self.complete(request)
        yield from sim_chunks(response)
        yield ResponseChunk(response)
