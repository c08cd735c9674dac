"""The sandbox's zygote, worker side (docs/dream/sandbox.md#the-zygote).

Forking the worker for every episode costs what the worker's size costs (page tables of a large
process). Instead, each worker process starts one small interpreter once — ``python -I -S`` importing
only :mod:`rsi_worker.dream.confine` (standard library) — and asks it to fork each episode's child.
The child is confined exactly as a direct fork would be (:func:`rsi_worker.dream.confine.confine`);
the worker talks to it over the two pipes it passes along, so the episode's messages never go through
the zygote.

A zygote that died (killed, crashed) is restarted at the next spawn, once; if the restart fails too,
:class:`ZygoteUnavailable` is raised and the sandbox forks the worker itself (for
:data:`RETRY_PAUSE_S`, then a new start is tried). A forked worker (a
Celery prefork child) never uses its parent's zygote: it starts its own.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import marshal
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

from rsi_worker.dream.confine import read_frame, write_frame

__all__ = ["RETRY_PAUSE_S", "Zygote", "ZygoteUnavailable", "zygote"]

log = logging.getLogger(__name__)
_ROOT = str(Path(__file__).resolve().parents[2])
_START_TIMEOUT_S = 30.0
RETRY_PAUSE_S = 60.0
"""After two failed starts in a row, episodes fork the worker for this long before a new try."""


class ZygoteUnavailable(RuntimeError):
    """The zygote could not be started (or restarted) or refused the request."""


class Zygote:
    """One worker process's zygote. Thread-safe: one request at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self.generation = 0
        """Incremented at every (re)start; a child is reaped through the zygote that forked it."""
        self._broken_until = 0.0

    @property
    def pid(self) -> int:
        """The zygote's pid (0 when not running)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else 0

    def _start(self) -> None:
        self._stop()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        boot = (
            f"import sys; sys.path.insert(0, {_ROOT!r}); "
            f"from rsi_worker.dream.confine import zygote_main; zygote_main({theirs.fileno()})"
        )
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", boot],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError as exc:
            mine.close()
            raise ZygoteUnavailable(f"cannot start the zygote: {exc}") from None
        finally:
            theirs.close()
        mine.settimeout(_START_TIMEOUT_S)
        self._sock = mine
        self.generation += 1

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.kill()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self._proc.wait(5.0)
            self._proc = None

    def _request(
        self, header: dict[str, Any], blob: bytes = b"", fds: list[int] | None = None
    ) -> dict[str, Any]:
        assert self._sock is not None
        write_frame(self._sock, header, blob, fds)
        reply, _, _ = read_frame(self._sock)
        return reply

    def spawn(
        self, code: types.CodeType, cpu_s: int, memory_bytes: int, fds: list[int]
    ) -> tuple[int, int, str]:
        """Fork a confined child serving ``code`` on ``fds`` (its read and write pipe ends; the caller
        closes its copies): ``(pid, generation, network barrier)``.

        Raises:
            ZygoteUnavailable: no zygote after one restart, or it refused the request.
        """
        blob = marshal.dumps(code)
        header = {"op": "spawn", "cpu_s": cpu_s, "memory_bytes": memory_bytes}
        with self._lock:
            if time.monotonic() < self._broken_until:
                raise ZygoteUnavailable("the zygote failed recently; retried after a pause")
            for attempt in (0, 1):
                if self._sock is None or self.pid == 0:
                    if attempt or self._sock is not None:
                        log.warning("the sandbox zygote is gone; restarting it")
                    try:
                        self._start()
                    except ZygoteUnavailable:
                        self._broken_until = time.monotonic() + RETRY_PAUSE_S
                        raise
                try:
                    reply = self._request(header, blob, fds)
                except (OSError, EOFError, ValueError) as exc:
                    log.warning("the sandbox zygote failed (%s)", type(exc).__name__)
                    self._stop()
                    continue
                if "pid" not in reply:
                    raise ZygoteUnavailable(str(reply.get("error", "the zygote refused"))[:300])
                return int(reply["pid"]), self.generation, str(reply["network"])
            self._broken_until = time.monotonic() + RETRY_PAUSE_S
        raise ZygoteUnavailable("the zygote died twice in a row")

    def reap(self, pid: int, generation: int, *, kill: bool) -> int | None:
        """Wait for the child (SIGKILL first when ``kill``) and reap it: its raw wait status, or None
        when the zygote that forked it is gone (then the child is killed directly and left to its new
        parent)."""
        with self._lock:
            if generation == self.generation and self._sock is not None:
                try:
                    status = self._request({"op": "reap", "pid": pid, "kill": kill}).get("status")
                    return None if status is None else int(status)
                except (OSError, EOFError, ValueError):
                    self._stop()
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        return None

    def release(self, pid: int, generation: int) -> None:
        """Have the child killed and reaped without waiting for it (the zygote does it before its next
        answer, so the episode's end costs one write)."""
        with self._lock:
            if generation == self.generation and self._sock is not None:
                try:
                    write_frame(self._sock, {"op": "reap", "pid": pid, "kill": True, "reply": False})
                    return
                except OSError:
                    self._stop()
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)

    def sync(self) -> None:
        """Return once the zygote has handled every earlier request (tests: children are reaped)."""
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(OSError, EOFError, ValueError):
                    self._request({"op": "sync"})

    def close(self) -> None:
        """Stop the zygote (its children are killed and reaped by it on end of file)."""
        with self._lock:
            self._stop()


_ZYGOTE: Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def zygote() -> Zygote:
    """This process's zygote (created lazily; started at the first spawn)."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None:
            _ZYGOTE = Zygote()
        return _ZYGOTE


def _forget_after_fork() -> None:
    """In a forked child: the parent's zygote is not ours (its socket is closed; the parent keeps it)."""
    global _ZYGOTE, _ZYGOTE_LOCK
    old, _ZYGOTE, _ZYGOTE_LOCK = _ZYGOTE, None, threading.Lock()
    if old is not None and old._sock is not None:
        with contextlib.suppress(OSError):
            old._sock.close()
        old._sock, old._proc = None, None


def _close_at_exit() -> None:
    if _ZYGOTE is not None:
        _ZYGOTE.close()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_close_at_exit)
