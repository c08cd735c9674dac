"""Running a turn on a thread and handing its events to a sync or async consumer.

The kernel is synchronous; a streamed turn runs on a private thread and its events cross over a
queue. When the consumer stops early (``break``, ``close()``, ``aclose()``, task cancellation) the
turn's cancel flag is set: the kernel stops at the next streamed chunk or model call, the turn ends
``cancelled`` and nothing of it is recorded; the consumer waits for the thread to end, so no turn
outlives its stream.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from rsi_common.kernel import EventSink

__all__ = ["TurnRunner", "astream_turn", "stream_turn"]

TurnRunner = Callable[[EventSink, Callable[[], bool]], Any]
"""Runs the turn with an event sink and a cancel check; returns the final event."""

_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _start(run: TurnRunner, put: Callable[[object], None], stop: threading.Event) -> threading.Thread:
    def body() -> None:
        try:
            put(run(put, stop.is_set))
        except BaseException as exc:  # handed to the consumer, raised there
            put(_Failure(exc))
        finally:
            put(_DONE)

    thread = threading.Thread(target=body, name="rsi-agent-turn", daemon=True)
    thread.start()
    return thread


def stream_turn(run: TurnRunner) -> Iterator[Any]:
    """Yield the turn's events, then its final event (module docstring)."""
    events: queue.SimpleQueue[object] = queue.SimpleQueue()
    stop = threading.Event()
    thread = _start(run, events.put, stop)
    try:
        while True:
            item = events.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join()


async def astream_turn(run: TurnRunner) -> AsyncIterator[Any]:
    """The async form of :func:`stream_turn` (the turn still runs on its own thread)."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[object] = asyncio.Queue()
    stop = threading.Event()

    def put(item: object) -> None:
        loop.call_soon_threadsafe(events.put_nowait, item)

    thread = _start(run, put, stop)
    try:
        while True:
            item = await events.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        await asyncio.to_thread(thread.join)
