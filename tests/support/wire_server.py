"""A local HTTP server that speaks the Anthropic and OpenAI wire formats, for client tests.

It serves ``POST /v1/messages`` (Anthropic Messages) and ``POST /v1/chat/completions`` (OpenAI Chat
Completions), plain or as server-sent events (a :class:`Reply` with ``events``: see
:func:`anthropic_stream` and :func:`openai_stream`; a stream can be cut after some events by a clean
end of the body or a connection reset, or paused until the test releases it). Each path has a queue
of scripted :class:`Reply` objects, consumed in order; when a queue is empty the optional
``responder`` answers (so long runs — whole consolidations — can plug in a function of the request
body), else the server answers HTTP 400 "no scripted reply". Every request is recorded (path, lower-
cased headers, JSON body) in :attr:`WireServer.received`.

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
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = [
    "ANTHROPIC",
    "OPENAI",
    "Received",
    "Reply",
    "WireServer",
    "anthropic_error",
    "anthropic_message",
    "anthropic_stream",
    "anthropic_text",
    "anthropic_tool_use",
    "openai_completion",
    "openai_error",
    "openai_stream",
    "pieces",
]

ANTHROPIC = "/v1/messages"
OPENAI = "/v1/chat/completions"


RELEASE_WAIT_S = 60.0
"""Longest hold of a reply waiting on its ``release`` (a test that forgot to set it still ends)."""

SseEvent = tuple[str | None, Any]
"""``(event name or None, data)``; data that is not a string is sent as JSON."""


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP reply: ``status``, JSON ``body``, extra ``headers``, a ``delay_s`` before it.

    A reply with ``events`` is a server-sent-events stream instead of a body: the events are
    written one by one (flushed each); with ``cut_after`` only that many are sent and the
    connection ends — ``cut="eof"`` a clean end of the body, ``"reset"`` a TCP reset; with
    ``pause_after`` the server waits after that many events until ``release`` is set (a test of
    cancellation sets it once the client is gone), then sends the rest. A plain reply (no
    ``events``) with ``release`` is held until it is set: a client timeout runs out first whatever
    the machine's load, where a ``delay_s`` shorter than a stall could let the reply win.
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    events: tuple[SseEvent, ...] | None = None
    cut_after: int | None = None
    cut: Literal["eof", "reset"] = "eof"
    pause_after: int | None = None
    release: threading.Event | None = None


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
        self.sent_events = 0
        """Server-sent events written so far (all streams)."""
        self.broken_streams = 0
        """Streams whose client went away before every event was written."""

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
            if reply.events is None and reply.release is not None:
                reply.release.wait(RELEASE_WAIT_S)
            if reply.events is not None:
                self._stream(reply)
                return
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

        def _stream(self, reply: Reply) -> None:
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.flush()
                assert reply.events is not None
                for i, (event, data) in enumerate(reply.events):
                    if reply.cut_after is not None and i >= reply.cut_after:
                        if reply.cut == "reset":  # RST instead of FIN: the client sees a broken connection
                            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                       struct.pack("ii", 1, 0))
                        self.close_connection = True
                        return
                    if reply.pause_after is not None and i == reply.pause_after and reply.release is not None:
                        reply.release.wait(RELEASE_WAIT_S)
                    text = data if isinstance(data, str) else json.dumps(data)
                    frame = (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
                    self.wfile.write(frame.encode("utf-8"))
                    self.wfile.flush()
                    server.sent_events += 1
            except OSError:  # the client went away (cancellation test)
                server.broken_streams += 1

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


# --- streams --------------------------------------------------------------------------------------


def pieces(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of ``size`` characters (at least one piece)."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def anthropic_stream(
    content: list[dict[str, Any]],
    *,
    piece_chars: int = 4,
    usage: dict[str, Any] | None = None,
    model: str = "claude-test",
    stop_reason: str | None = None,
) -> tuple[SseEvent, ...]:
    """The Messages API stream of ``content`` (text and tool_use blocks): text and tool input JSON
    cut into ``piece_chars`` pieces; input usage in ``message_start``, output usage in
    ``message_delta`` (the protocol's split)."""
    u = usage or {"input_tokens": 10, "output_tokens": 5}
    if stop_reason is None:
        stop_reason = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
    start_usage = {k: v for k, v in u.items() if k != "output_tokens"} | {"output_tokens": 1}
    events: list[SseEvent] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_test", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage}})]
    for i, block in enumerate(content):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            events += [("content_block_delta", {"type": "content_block_delta", "index": i,
                                                "delta": {"type": "text_delta", "text": p}})
                       for p in pieces(block["text"], piece_chars)]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": start}))
            events += [("content_block_delta", {"type": "content_block_delta", "index": i,
                                                "delta": {"type": "input_json_delta", "partial_json": p}})
                       for p in pieces(json.dumps(block["input"]), piece_chars)]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                     "usage": {"output_tokens": u["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return tuple(events)


def openai_stream(
    text: str | None = None,
    *,
    tool_calls: list[tuple[str, str, dict[str, Any]]] | None = None,
    piece_chars: int = 4,
    usage: dict[str, Any] | None = None,
    model: str = "gpt-test",
    finish_reason: str | None = None,
) -> tuple[SseEvent, ...]:
    """The Chat Completions stream of a reply: content and each tool call's arguments cut into
    ``piece_chars`` pieces (a call's first delta carries its id and name), then the finish reason,
    a usage-only chunk (``stream_options.include_usage``) and ``[DONE]``."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> SseEvent:
        return (None, {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

    events: list[SseEvent] = [chunk({"role": "assistant", "content": ""})]
    if text:
        events += [chunk({"content": p}) for p in pieces(text, piece_chars)]
    for index, (call_id, name, args) in enumerate(tool_calls or []):
        parts = pieces(json.dumps(args), piece_chars)
        events.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": parts[0]}}]}))
        events += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in parts[1:]]
    if finish_reason is None:
        finish_reason = "tool_calls" if tool_calls else "stop"
    events.append(chunk({}, finish_reason))
    used = usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    events.append((None, {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0,
                          "model": model, "choices": [], "usage": used}))
    events.append((None, "[DONE]"))
    return tuple(events)
