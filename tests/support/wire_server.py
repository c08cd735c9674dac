"""A local HTTP server that speaks the Anthropic and OpenAI wire formats, for client tests.

It serves ``POST /v1/messages`` (Anthropic Messages) and ``POST /v1/chat/completions`` (OpenAI Chat
Completions). Each path has a queue of scripted :class:`Reply` objects, consumed in order; when a
queue is empty the optional ``responder`` answers (so long runs — whole consolidations — can plug
in a function of the request body), else the server answers HTTP 400 "no scripted reply". Every
request is recorded (path, lower-cased headers, JSON body) in :attr:`WireServer.received`.

Usage::

    with WireServer() as srv:
        srv.push(ANTHROPIC, Reply(body=anthropic_text("hi")))
        settings = Settings(anthropic_api_key="test" + "-key", anthropic_base_url=srv.anthropic_base_url)
        ...
        srv.bodies(ANTHROPIC)  # what the client sent

Point the Anthropic SDK at :attr:`WireServer.anthropic_base_url` and the OpenAI SDK at
:attr:`WireServer.openai_base_url` (which ends in ``/v1``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "ANTHROPIC",
    "OPENAI",
    "Received",
    "Reply",
    "WireServer",
    "anthropic_error",
    "anthropic_message",
    "anthropic_text",
    "anthropic_tool_use",
    "openai_completion",
    "openai_error",
]

ANTHROPIC = "/v1/messages"
OPENAI = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP reply: ``status``, JSON ``body``, extra ``headers``, a ``delay_s`` before it."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    """One recorded request."""

    path: str
    headers: dict[str, str]
    body: Any


Responder = Callable[[Received], Reply]


class WireServer:
    """The server; a context manager (``start`` / ``stop``). Thread-safe."""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder = responder
        self.received: list[Received] = []
        self._queues: dict[str, deque[Reply]] = {ANTHROPIC: deque(), OPENAI: deque()}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> WireServer:
        """Bind to a free port on 127.0.0.1 and serve in a daemon thread."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- addresses ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def anthropic_base_url(self) -> str:
        """Base URL for the Anthropic SDK."""
        return self.url

    @property
    def openai_base_url(self) -> str:
        """Base URL for the OpenAI SDK (``…/v1``)."""
        return self.url + "/v1"

    # --- script and record ----------------------------------------------------------------------

    def push(self, path: str, *replies: Reply) -> None:
        """Queue ``replies`` for ``path`` (:data:`ANTHROPIC` or :data:`OPENAI`)."""
        with self._lock:
            self._queues.setdefault(path, deque()).extend(replies)

    def pending(self, path: str) -> int:
        """Replies still queued for ``path``."""
        with self._lock:
            return len(self._queues.get(path, ()))

    def bodies(self, path: str) -> list[Any]:
        """JSON bodies received on ``path``, in order."""
        with self._lock:
            return [r.body for r in self.received if r.path == path]

    def _next(self, received: Received) -> Reply:
        with self._lock:
            self.received.append(received)
            queue = self._queues.get(received.path)
            if queue:
                return queue.popleft()
        if self.responder is not None:
            return self.responder(received)
        message = f"wire server: no scripted reply for {received.path}"
        if received.path == OPENAI:
            return openai_error(400, message)
        return anthropic_error(400, message)


def _handler_for(server: WireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw.decode("utf-8")) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            path = self.path.split("?", 1)[0]
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = server._next(Received(path=path, headers=headers, body=body))
            if reply.delay_s > 0:
                time.sleep(reply.delay_s)
            data = json.dumps(reply.body if reply.body is not None else {}).encode("utf-8")
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout test)
                pass

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


# --- Anthropic bodies -----------------------------------------------------------------------------


def anthropic_message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    model: str = "claude-test",
) -> dict[str, Any]:
    """A Messages API response body."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def anthropic_text(text: str, **kw: Any) -> dict[str, Any]:
    """A Messages API body with one text block."""
    return anthropic_message([{"type": "text", "text": text}], **kw)


def anthropic_tool_use(
    name: str, tool_input: dict[str, Any], *, id: str = "toolu_1", text: str | None = None, **kw: Any
) -> dict[str, Any]:
    """A Messages API body with an optional text block and one tool_use block."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks.append({"type": "tool_use", "id": id, "name": name, "input": tool_input})
    return anthropic_message(blocks, **kw)


def anthropic_error(status: int, message: str, kind: str = "api_error") -> Reply:
    """An Anthropic error reply."""
    return Reply(status=status, body={"type": "error", "error": {"type": kind, "message": message}})


# --- OpenAI bodies --------------------------------------------------------------------------------


def openai_completion(
    text: str | None = None,
    *,
    tool_calls: list[tuple[str, str, dict[str, Any]]] | None = None,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    model: str = "gpt-test",
    extra_message: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Chat Completions response body; ``tool_calls`` as ``(id, name, arguments)`` triples."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in tool_calls
        ]
    message.update(extra_message or {})
    if finish_reason is None:
        finish_reason = "tool_calls" if tool_calls else "stop"
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def openai_error(status: int, message: str, kind: str = "server_error") -> Reply:
    """An OpenAI error reply."""
    return Reply(status=status, body={"error": {"message": message, "type": kind, "code": None}})
