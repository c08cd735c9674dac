"""Running a turn on a thread and handing its events to a sync or async consumer.

The kernel is synchronous; a streamed turn runs on a private thread and its events cross over a
queue. The queue holds at most :data:`MAX_AHEAD` events the consumer has not taken, so the turn
never runs far ahead of its reader (the model's chunks are read as fast as the host takes them).
When the consumer stops early (``break``, ``close()``, ``aclose()``, task cancellation) the turn's
cancel flag is set: events not yet queued are dropped, the kernel stops at the next streamed chunk
or model call, the turn ends ``cancelled`` and nothing of it is recorded; the consumer waits for the
thread to end, so no turn outlives its stream.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from rsi_common.kernel import EventSink

__all__ = ["MAX_AHEAD", "TurnRunner", "astream_turn", "stream_turn"]

TurnRunner = Callable[[EventSink, Callable[[], bool]], Any]
"""Runs the turn with an event sink and a cancel check; returns the final event."""

MAX_AHEAD = 2
"""Events the turn may queue before its consumer takes them."""
_POLL_S = 0.05

_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Event:
    """An event that holds one of the :data:`MAX_AHEAD` slots until the consumer takes it."""

    def __init__(self, item: Any) -> None:
        self.item = item


def _start(run: TurnRunner, deliver: Callable[[object], None], stop: threading.Event,
           slots: threading.Semaphore) -> threading.Thread:
    def sink(item: Any) -> None:
        while not slots.acquire(timeout=_POLL_S):
            if stop.is_set():
                return
        if stop.is_set():
            slots.release()
            return
        deliver(_Event(item))

    def body() -> None:
        try:
            deliver(run(sink, stop.is_set))
        except BaseException as exc:  # handed to the consumer, raised there
            deliver(_Failure(exc))
        finally:
            deliver(_DONE)

    thread = threading.Thread(target=body, name="rsi-agent-turn", daemon=True)
    thread.start()
    return thread


def _unwrap(item: object, slots: threading.Semaphore) -> Any:
    if isinstance(item, _Failure):
        raise item.exc
    if isinstance(item, _Event):
        slots.release()
        return item.item
    return item


def stream_turn(run: TurnRunner) -> Iterator[Any]:
    """Yield the turn's events, then its final event (module docstring)."""
    events: queue.SimpleQueue[object] = queue.SimpleQueue()
    stop = threading.Event()
    slots = threading.Semaphore(MAX_AHEAD)
    thread = _start(run, events.put, stop, slots)
    try:
        while True:
            item = events.get()
            if item is _DONE:
                return
            yield _unwrap(item, slots)
    finally:
        stop.set()
        thread.join()


async def astream_turn(run: TurnRunner) -> AsyncIterator[Any]:
    """The async form of :func:`stream_turn` (the turn still runs on its own thread)."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[object] = asyncio.Queue()
    stop = threading.Event()
    slots = threading.Semaphore(MAX_AHEAD)

    def deliver(item: object) -> None:
        loop.call_soon_threadsafe(events.put_nowait, item)

    thread = _start(run, deliver, stop, slots)
    try:
        while True:
            item = await events.get()
            if item is _DONE:
                return
            yield _unwrap(item, slots)
    finally:
        stop.set()
        await asyncio.to_thread(thread.join)
