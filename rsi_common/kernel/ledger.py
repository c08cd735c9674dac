"""The ledger of model calls and c(τ) (docs/formats.md §7.4), and the retrying, cancellable model caller.

Every model call of a turn — every purpose, every attempt — is one :class:`CallRecord`.
c(τ) (``policy_tokens``) = Σ (input_tokens + output_tokens) over all records; failed attempts
carry zero tokens. Billing usage reported to the host counts only ``main`` calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from rsi_common.errors import ModelError, ModelTransientError
from rsi_common.kernel.events import EventSink, StepReset, TextDelta, ThinkingDelta
from rsi_common.kernel.types import RetryPolicy, TurnStatus
from rsi_common.llm.streaming import ResponseChunk, TextChunk, ThinkingChunk, stream_call

if TYPE_CHECKING:
    from rsi_common.llm import ModelClient, ModelRequest, ModelResponse

log = logging.getLogger(__name__)

__all__ = ["PURPOSES", "CallRecord", "Ledger", "ModelCaller", "Purpose", "TurnStop"]

Purpose = Literal["main", "compact", "distill", "subagent", "auxiliary"]
PURPOSES: tuple[str, ...] = ("main", "compact", "distill", "subagent", "auxiliary")


class TurnStop(Exception):
    """Ends the turn from inside a stage (cancel, cost budget, model failure, guard rejection).

    Attributes mirror the status mapping of docs/formats.md §7.3.
    """

    def __init__(
        self, status: TurnStatus, reason: str, message: str = "", error_class: str = "", response: Any = None
    ) -> None:
        super().__init__(f"{reason}: {message}" if message else reason)
        self.status = status
        self.reason = reason
        self.message = message
        self.error_class = error_class
        self.response = response
        """The model response that crossed the cost budget (kept in history), else None."""


@dataclass
class CallRecord:
    """One model call (docs/formats.md §7.4); ``error`` is ``"<Type>: <msg>"`` (≤ 300 chars) or ``""``."""

    purpose: str
    provider: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int | None = None
    duration_s: float = 0.0
    stop_reason: str = ""
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict of every field."""
        return asdict(self)


@dataclass
class Ledger:
    """All model calls of one turn."""

    records: list[CallRecord] = field(default_factory=list)

    def add(self, record: CallRecord) -> None:
        """Append one record."""
        self.records.append(record)

    def policy_tokens(self) -> int:
        """c(τ): Σ input + output tokens over every call of the turn, every purpose."""
        return sum(r.input_tokens + r.output_tokens for r in self.records)

    def main_input_tokens(self) -> int:
        """Σ input tokens of this turn's ``main`` calls (the turn input budget of docs/formats.md §5.6)."""
        return sum(r.input_tokens for r in self.records if r.purpose == "main")

    def model_time_s(self) -> float:
        """Seconds spent inside the model client (all calls)."""
        return sum(r.duration_s for r in self.records)

    def usage_by_purpose(self) -> dict[str, dict[str, int]]:
        """``{purpose: {calls, input_tokens, output_tokens}}`` for purposes that occurred."""
        out: dict[str, dict[str, int]] = {}
        for r in self.records:
            u = out.setdefault(r.purpose, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
            u["calls"] += 1
            u["input_tokens"] += r.input_tokens
            u["output_tokens"] += r.output_tokens
        return out

    def billing_usage(self) -> dict[str, int]:
        """Usage of successful ``main`` calls only (what the host bills)."""
        main = [r for r in self.records if r.purpose == "main" and not r.error]
        return {
            "calls": len(main),
            "input_tokens": sum(r.input_tokens for r in main),
            "output_tokens": sum(r.output_tokens for r in main),
            "cache_read_tokens": sum(r.cache_read_tokens for r in main),
            "cache_write_tokens": sum(r.cache_write_tokens for r in main),
        }


class ModelCaller:
    """Calls the model for the turn: cancel check, retries with backoff, ledger, cost budget.

    Args:
        client: the policy model client.
        ledger: where every attempt is recorded.
        retry: retries on :class:`ModelTransientError` (other model errors are not retried).
        sleep: injectable sleep (seconds) used for the backoff.
        cancelled: checked before every call attempt; True → ``TurnStop("cancelled", "CANCELLED")``.
        max_turn_tokens: c(τ) above it after a call → ``TurnStop("blocked", "COST_BUDGET")``.
        clock: injectable monotonic clock for ``duration_s``.
        on_event: the host's event callback; when set, ``main`` calls stream
            (:mod:`rsi_common.llm.streaming`) and their text reaches it as it arrives. The cancel
            check then runs between chunks too, so a cancelled stream stops at the next chunk.
    """

    def __init__(
        self,
        client: ModelClient,
        ledger: Ledger,
        *,
        retry: RetryPolicy,
        sleep: Callable[[float], None] = time.sleep,
        cancelled: Callable[[], bool] | None = None,
        max_turn_tokens: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
        on_event: EventSink | None = None,
    ) -> None:
        self.client = client
        self.on_event = on_event
        self.step = 0
        """The main step whose call streams (set by the loop; carried by the events)."""
        self.ledger = ledger
        self.retry = retry
        self.sleep = sleep
        self.cancelled = cancelled
        self.max_turn_tokens = max_turn_tokens
        self.clock = clock

    def _record(self, purpose: str, t0: float, response: ModelResponse | None, error: str) -> None:
        rec = CallRecord(
            purpose=purpose,
            provider=str(getattr(self.client, "provider", "")),
            model=str(getattr(self.client, "model", "")),
            duration_s=max(0.0, self.clock() - t0),
            error=error[:300],
        )
        if response is not None:
            u = response.usage
            rec.input_tokens = int(u.input_tokens)
            rec.output_tokens = int(u.output_tokens)
            rec.cache_read_tokens = int(u.cache_read_tokens)
            rec.cache_write_tokens = int(u.cache_write_tokens)
            rec.reasoning_tokens = u.reasoning_tokens
            rec.stop_reason = str(response.stop_reason)
        self.ledger.add(rec)

    def _check_cancel(self) -> None:
        if self.cancelled is not None and self.cancelled():
            raise TurnStop("cancelled", "CANCELLED", "the turn was cancelled")

    def emit(self, event: Any) -> None:
        """Hand ``event`` to the host's callback; its exceptions are logged, never raised."""
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception as exc:  # a host display never fails the turn
            log.warning("the host's event callback raised %s", type(exc).__name__)

    def _attempt(self, request: ModelRequest, purpose: Purpose) -> ModelResponse:
        """One attempt. A streamed attempt forwards text as it arrives; the model error of a failed
        one carries ``rsi_streamed`` (whether the host saw partial output) so that it can be voided.
        """
        if self.on_event is None or purpose != "main":
            return self.client.complete(request)
        streamed = False
        chunks = stream_call(self.client, request)
        try:
            for chunk in chunks:
                if isinstance(chunk, ResponseChunk):
                    return chunk.response
                self._check_cancel()
                if isinstance(chunk, TextChunk) and chunk.text:
                    streamed = True
                    self.emit(TextDelta(chunk.text, self.step))
                elif isinstance(chunk, ThinkingChunk) and chunk.text:
                    streamed = True
                    self.emit(ThinkingDelta(chunk.text, self.step))
        except ModelError as exc:
            exc.rsi_streamed = streamed  # type: ignore[attr-defined]
            raise
        finally:
            chunks.close()
        provider = getattr(self.client, "provider", "")
        ended = ModelTransientError(f"{provider}: the stream ended without a response")
        ended.rsi_streamed = streamed  # type: ignore[attr-defined]
        raise ended

    def call(self, request: ModelRequest, purpose: Purpose = "main") -> ModelResponse:
        """One logical model call with up to ``retry.retries`` retries.

        Raises:
            TurnStop: cancelled, model failure (``failed``/``MODEL_ERROR``) or cost budget exceeded.
        """
        delays = self.retry.delays_s()
        attempt = 0
        while True:
            self._check_cancel()
            t0 = self.clock()
            try:
                response = self._attempt(request, purpose)
            except TurnStop:
                self._record(purpose, t0, None, "Cancelled: the turn was cancelled during the stream")
                raise
            except ModelTransientError as exc:
                self._record(purpose, t0, None, f"{type(exc).__name__}: {exc}")
                if getattr(exc, "rsi_streamed", False):
                    self.emit(StepReset(self.step, type(exc).__name__))
                if attempt >= len(delays):
                    raise TurnStop("failed", "MODEL_ERROR", f"{type(exc).__name__}: {exc}",
                                   type(exc).__name__) from exc
                self.sleep(delays[attempt])
                attempt += 1
                continue
            except ModelError as exc:
                self._record(purpose, t0, None, f"{type(exc).__name__}: {exc}")
                raise TurnStop("failed", "MODEL_ERROR", f"{type(exc).__name__}: {exc}",
                               type(exc).__name__) from exc
            self._record(purpose, t0, response, "")
            self._check_budget(response)
            return response

    def _check_budget(self, response: ModelResponse) -> None:
        limit = self.max_turn_tokens
        if limit is not None and self.ledger.policy_tokens() > limit:
            raise TurnStop("blocked", "COST_BUDGET",
                           f"c(τ) {self.ledger.policy_tokens()} exceeds max_turn_tokens {limit}",
                           response=response)
