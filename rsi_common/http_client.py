"""The host API over HTTP: :class:`RsiHttpClient` has the host-facing methods of
:class:`~rsi_common.client.RsiClient` — ``record_turn``, ``record_signals``, ``current_harness``,
``run_turn`` — and needs only the service URL and a token with the ``host`` scope (no SQL or Redis
credentials; docs/service/api.md).

Usage::

    client = RsiHttpClient("https://rsi.internal", token)      # one per process, thread-safe
    harness = client.current_harness("agent-1")                 # cached; the event stream invalidates
    result = client.run_turn("agent-1", plan, model)            # resolve, run, record
    client.close()

**Harness cache.** Each agent's harness is cached for ``cache_ttl_s`` seconds, like the library's.
A daemon thread holds one server-sent-events stream (``GET /v1/harness/events``) for every agent the
token sees; each ``harness`` event drops that agent's entry at once, so an adoption, rollback or pin
applies from the host's next turn without polling. Every (re)connection of the stream clears the
whole cache (events may have been missed); while the stream is down the TTL bounds staleness. An
expired entry is revalidated with ``If-None-Match`` (a 304 costs no payload).

**Retries.** Connection errors, timeouts, 429 (after ``Retry-After``, capped) and 502/503/504 are
retried ``retries`` times with exponential backoff from ``backoff_s``; recording is idempotent per
``io_id``, so a retried request never stores a turn twice. The two record calls keep retrying (backoff
capped at :data:`MAX_BACKOFF_S`) until ``record_retry_s`` is spent — long enough for the service to
ride out a database or Redis restart (a 503 while its own retries run out). Then
:class:`ServiceUnavailable` is raised; for a record call its message says the turn was not stored.

**Errors** are the library's: a problem document of an input error is raised as the class it names
(``WorldError``, ``CredentialError``, ``InputLimitError``, ``UnknownAgentError``, …) with the
service's message (field paths, never values); 401/403 raise :class:`AccessDenied`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from rsi_common import errors
from rsi_common.boundary import check_id
from rsi_common.client import CANCELLED_NOT_RECORDED, RecordedTurn
from rsi_common.errors import AccessDenied, InvalidInput, ServiceUnavailable
from rsi_common.harness import Harness, materialize
from rsi_common.host_input import check_plan
from rsi_common.invalidation import HarnessCache
from rsi_common.kernel import EventSink, RetryPolicy, TurnPlan, TurnResult, run_turn
from rsi_common.llm import ModelClient
from rsi_common.stored import safe_reason

__all__ = ["RETRY_STATUSES", "RsiHttpClient"]

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0
MAX_BACKOFF_S = 2.0
"""Longest single backoff of the record calls' time-budgeted retries."""
STREAM_READ_TIMEOUT_S = 45.0
"""The server sends a keep-alive every 15 s; three missed ones mean the stream is dead."""

_Cached = tuple[Harness, str, str]  # harness, label, etag


def _error_class(name: str) -> type[InvalidInput]:
    cls = getattr(errors, str(name), None)
    return cls if isinstance(cls, type) and issubclass(cls, InvalidInput) else InvalidInput


def _turn_body(turn: TurnResult | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(turn, TurnResult):
        return {"world": turn.world, "trajectory": turn.trajectory}
    if not isinstance(turn, Mapping):
        raise InvalidInput(f"a turn must be a TurnResult or a mapping, got {type(turn).__name__}")
    return dict(turn)


class RsiHttpClient:
    """The host API over HTTP (module docstring).

    Args:
        base_url: the service's URL (``https://host:port``).
        token: an API token with the ``host`` scope.
        timeout_s: connect / read timeout of one request.
        retries: retries of a failed request (module docstring).
        backoff_s: the first retry delay; doubled per retry (0 in tests).
        record_retry_s: seconds ``record_turn`` / ``record_signals`` keep retrying (module docstring).
        cache_ttl_s: seconds a harness is served from the cache (0: no cache).
        listen: hold the event stream that invalidates the cache (started on the first
            :meth:`current_harness`, or by :meth:`start_listener`).
        record_world: capture worlds in :meth:`run_turn` (``RSI_RECORD_WORLD``).
        model_retry: model retries of :meth:`run_turn` (default: the kernel's).
        transport: an httpx transport (tests).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.2,
        record_retry_s: float = 30.0,
        cache_ttl_s: float = 15.0,
        listen: bool = True,
        record_world: bool = True,
        model_retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not isinstance(token, str) or not token:
            raise InvalidInput("token: give the service API token (scope host)")
        self.base_url = base_url.rstrip("/")
        self.retries, self.backoff_s = retries, backoff_s
        if not 0 <= record_retry_s <= 600:
            raise InvalidInput("record_retry_s must be between 0 and 600")
        self.record_retry_s = float(record_retry_s)
        self.record_world, self.model_retry = record_world, model_retry
        self._sleep: Callable[[float], None] = time.sleep
        """Waits between attempts (tests count the pauses instead)."""
        self._clock: Callable[[], float] = time.monotonic
        """Reads the seconds a request's retries have spent (tests replace it with one that only
        the pauses advance, so a slow attempt on a loaded machine does not shorten the budget)."""
        headers = {"Authorization": f"Bearer {token}", "User-Agent": "rsi-http-client/1"}
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, transport=transport, timeout=httpx.Timeout(timeout_s)
        )
        self._stream_http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            transport=transport,
            timeout=httpx.Timeout(timeout_s, read=STREAM_READ_TIMEOUT_S),
        )
        self._cache: HarnessCache[_Cached] = HarnessCache(cache_ttl_s)
        self._etags: dict[str, _Cached] = {}
        self._listen = listen
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._response: httpx.Response | None = None
        self.events = 0
        """``harness`` events received (diagnostics and tests)."""
        self.on_change: Callable[[dict[str, Any]], None] | None = None
        """Called (on the stream thread) with each ``harness`` event's data, after the invalidation."""

    # --- requests --------------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, *, body: Any = None, headers: Mapping[str, str] | None = None,
        budget_s: float = 0.0,
    ) -> httpx.Response:
        """One request with the retries of the module docstring: at least ``retries``, and more while
        ``budget_s`` seconds (from the first attempt) are not spent."""
        content = None if body is None else json.dumps(body, allow_nan=False, ensure_ascii=False).encode()
        hdrs = dict(headers or {})
        if content is not None:
            hdrs["Content-Type"] = "application/json"
        last = ""
        t0, attempt = self._clock(), -1
        while True:
            attempt += 1
            delay = min(MAX_BACKOFF_S, self.backoff_s * (2 ** min(attempt, 30)))
            try:
                resp = self._http.request(method, path, content=content, headers=hdrs)
            except httpx.TransportError as exc:
                last = type(exc).__name__
            else:
                if resp.status_code not in RETRY_STATUSES:
                    return self._checked(resp)
                last = f"HTTP {resp.status_code}"
                retry_after = resp.headers.get("retry-after", "")
                if retry_after.isdigit():
                    delay = max(delay, min(float(retry_after), MAX_RETRY_AFTER_S))
            if attempt >= self.retries and (delay <= 0 or self._clock() - t0 + delay > budget_s):
                break
            self._sleep(delay)
        not_stored = "the turn was not stored: " if budget_s else ""
        raise ServiceUnavailable(
            f"{method} {path}: {not_stored}the service did not answer ({last}) after {attempt} retries "
            f"in {self._clock() - t0:.1f} s"
        )

    @staticmethod
    def _checked(resp: httpx.Response) -> httpx.Response:
        if resp.status_code < 400:
            return resp
        try:
            problem = resp.json()
        except ValueError:
            problem = {}
        detail = str(problem.get("detail") or resp.reason_phrase)
        if resp.status_code in (401, 403):
            raise AccessDenied(f"the service refused the token ({resp.status_code}): {detail}")
        if resp.status_code >= 500:
            raise ServiceUnavailable(f"the service failed ({resp.status_code}): {detail}")
        raise _error_class(str(problem.get("error", "")))(detail)

    # --- recording ---------------------------------------------------------------------------------

    def record_turn(self, agent_id: str, turn: TurnResult | Mapping[str, Any]) -> RecordedTurn:
        """Store a finished turn and trigger the agent's consolidation (``RsiClient.record_turn``).

        Raises:
            WorldError, CredentialError, InputLimitError, InvalidInput: the service refused the turn
                (nothing stored); the message names the field.
            AccessDenied: the token lacks ``host`` or the agent is outside its prefix.
            ServiceUnavailable: the service could not be reached (or kept answering 5xx) for
                ``record_retry_s``: the turn was not stored.
        """
        check_id(agent_id, "agent_id")
        body = _turn_body(turn)
        resp = self._request("POST", f"/v1/agents/{agent_id}/turns", body=body, budget_s=self.record_retry_s)
        return RecordedTurn(**resp.json())

    def record_signals(self, agent_id: str, io_id: str, signals: Mapping[str, Any]) -> RecordedTurn:
        """Merge explicit signals into a stored turn and trigger (``RsiClient.record_signals``).

        Raises:
            UnknownAgentError: no such agent.
            InvalidInput: no stored world for ``io_id``, or malformed signals.
            AccessDenied, ServiceUnavailable: as :meth:`record_turn`.
        """
        check_id(agent_id, "agent_id")
        check_id(io_id, "io_id")
        if not isinstance(signals, Mapping):
            raise InvalidInput(f"signals: must be an object, got {type(signals).__name__}")
        resp = self._request("POST", f"/v1/agents/{agent_id}/turns/{io_id}/signals", body=dict(signals),
                             budget_s=self.record_retry_s)
        return RecordedTurn(**resp.json())

    # --- the current harness -----------------------------------------------------------------------

    def current_harness(self, agent_id: str) -> Harness:
        """The harness the agent's next turn must use (cached; module docstring).

        Raises:
            InputLimitError: the agent id breaks the id grammar.
            TamperError, ManifestError: the served payload is invalid.
            AccessDenied, ServiceUnavailable: as :meth:`record_turn`.
        """
        return self._resolve(agent_id)[0]

    def _resolve(self, agent_id: str) -> _Cached:
        check_id(agent_id, "agent_id")
        if self._listen:
            self._ensure_listener()
        hit = self._cache.get(agent_id)
        if hit is not None:
            return hit
        token = self._cache.token(agent_id)
        with self._lock:
            stale = self._etags.get(agent_id)
        headers = {"If-None-Match": stale[2]} if stale is not None else None
        resp = self._request("GET", f"/v1/agents/{agent_id}/harness", headers=headers)
        if resp.status_code == 304 and stale is not None:
            value = stale
        else:
            data = resp.json()
            value = (materialize(data["payload"]), str(data["label"]), resp.headers.get("etag", ""))
        with self._lock:
            self._etags[agent_id] = value
        self._cache.put(agent_id, value, token)
        return value

    def invalidate(self, agent_id: str) -> None:
        """Drop the agent's cached harness (the next call reads it again)."""
        self._cache.invalidate(agent_id)
        with self._lock:
            self._etags.pop(agent_id, None)

    # --- the event stream --------------------------------------------------------------------------

    def start_listener(self, wait_s: float = 1.0) -> bool:
        """Start the event stream now and wait up to ``wait_s`` for it to connect.

        Returns:
            Whether the stream is connected (False: the TTL still bounds staleness).
        """
        self._ensure_listener()
        return self._subscribed.wait(wait_s)

    def _ensure_listener(self) -> None:
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._listen_loop, name="rsi-http-harness-events", daemon=True
                )
                self._thread.start()

    def _listen_loop(self) -> None:
        delay = 0.05
        while not self._stop.is_set():
            try:
                with self._stream_http.stream(
                    "GET", "/v1/harness/events", headers={"Accept": "text/event-stream"}
                ) as resp:
                    self._checked(resp)
                    self._response = resp
                    for event, data in _events(resp.iter_lines()):
                        self._on_event(event, data)
                        delay = 0.05
                        if self._stop.is_set():
                            return
            except Exception as exc:  # reconnect whatever broke, unless stopping
                if self._stop.is_set():
                    return
                log.debug("harness event stream: %s; reconnecting in %.2f s", type(exc).__name__, delay)
            finally:
                self._subscribed.clear()
                self._response = None
            self._stop.wait(delay)
            delay = min(delay * 2, 5.0)

    def _on_event(self, event: str, data: dict[str, Any]) -> None:
        if event in ("ready", "reset"):
            self._cache.clear()
            with self._lock:
                self._etags.clear()
            self._subscribed.set()
        elif event == "harness":
            agent = str(data.get("agent_id", ""))
            self.invalidate(agent)
            self.events += 1
            if self.on_change is not None:
                self.on_change(data)

    # --- convenience -------------------------------------------------------------------------------

    def run_turn(
        self, agent_id: str, plan: TurnPlan, model_client: ModelClient, *, seed: int | None = None,
        on_event: EventSink | None = None, cancelled: Callable[[], bool] | None = None,
    ) -> TurnResult:
        """Resolve the harness, run one kernel turn here with it, record the turn over HTTP.

        Like ``RsiClient.run_turn``: the harness is resolved once and used for the whole turn, and
        recording never loses the answer (``recorded = False`` and ``record_error`` say why);
        ``on_event`` and ``cancelled`` as there (a cancelled turn is not recorded).

        Raises:
            InvalidInput: ``plan.io_id`` is empty, or ``plan.agent_id`` names another agent.
            InputLimitError: an id of the plan breaks the id grammar.
        """
        plan = check_plan(agent_id, plan)
        harness, label, _ = self._resolve(agent_id)
        result = run_turn(
            plan,
            harness,
            model_client,
            record_world=self.record_world,
            seed=seed,
            retry=self.model_retry,
            lineage=label,
            on_event=on_event,
            cancelled=cancelled,
        )
        if result.status == "cancelled":
            result.recorded, result.record_error = False, CANCELLED_NOT_RECORDED
            return result
        try:
            self.record_turn(agent_id, result)
        except Exception as exc:  # the host keeps its answer whatever recording does
            log.error("agent %s: turn not recorded: %s", agent_id, type(exc).__name__)
            result.recorded, result.record_error = False, f"not recorded: {safe_reason(exc, 200)}"
            return result
        result.recorded = not result.record_error
        return result

    # --- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the event stream and close the connections. Idempotent."""
        self._stop.set()
        resp = self._response
        if resp is not None:
            try:
                resp.close()
            except Exception as exc:  # the stream is being dropped anyway
                log.debug("closing the event stream failed: %s", type(exc).__name__)
        self._stream_http.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        self._http.close()

    def __enter__(self) -> RsiHttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Server-sent events as ``(event, data)``; comments and ``retry`` lines are skipped."""
    event, data = "message", ""
    for line in lines:
        if not line:
            if data:
                try:
                    parsed = json.loads(data)
                except ValueError:
                    parsed = {}
                yield event, parsed if isinstance(parsed, dict) else {}
            event, data = "message", ""
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
